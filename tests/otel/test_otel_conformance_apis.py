"""Conformance beyond chat completions: the OpenAI Responses API and Anthropic's Messages API,
with tool use, under their real instrumentations (tests/otel/api_agents.py), against the
loopback provider speaking each API (tests/otel/provider.py).

At the decoder (official OTLP encoders, protobuf and JSON, then the monitor's decoder and
mapping) and end to end (the official OTLP/HTTP and OTLP/gRPC exporters to the real worker,
traces split over several requests; the events read back from Postgres), per conversation the
transcript must equal what the agent really sent and received.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as json_spans
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.otel.decode import JSON, PROTOBUF, decode_request
from monitor.otel.mapping import MappingConfig, map_spans
from tests.otel.api_agents import API_FLAVORS, API_GAPS
from tests.otel.conformance import PYDANTIC_AI, cases_for, instrumented, play, transcript
from tests.otel.framework_agents import run_sub_agent_as_tool
from tests.otel.provider import Provider
from tests.otel.test_otel_conformance import TOKEN, exporter, start_worker, stored
from tests.otel.test_otel_conformance_spans import by_conversation
from tests.servers.worker import WorkerProcess, create_topic, wait_for_count


def settled(cid: str, entries: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A pydantic-ai conversation's ``entries`` with each run of consecutive tool results in
    call id order: pydantic-ai runs the calls of one answer concurrently, so the order in which
    they finish (their spans' end, the order stored) is a race; everything else keeps its
    order. Other flavors run their tools one after the other: ``entries`` as they are."""
    if not cid.startswith(PYDANTIC_AI):
        return entries
    out: list[tuple[Any, ...]] = []
    run: list[tuple[Any, ...]] = []
    for entry in [*entries, ("end",)]:
        if entry[0] == "tool_result":
            run.append(entry)
            continue
        out.extend(sorted(run, key=lambda e: str(e[1])))
        run = []
        out.append(entry)
    return out[:-1]


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", "true")


FLAVORS = (*API_FLAVORS, PYDANTIC_AI)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="tool call ids: see API_GAPS")
@pytest.mark.parametrize("flavor", API_GAPS)
def test_known_gaps_are_not_reconstructed_exactly(flavor: str):
    """The flavors that fail (API_GAPS), in a process of their own (``tests.otel.capture
    --check``: Traceloop's openai instrumentor leaves patches behind when uninstrumented); this
    test fails (strict) once they pass."""
    env = {
        **os.environ,
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
    }
    run = subprocess.run(
        [sys.executable, "-m", "tests.otel.capture", "--check", flavor],
        cwd=Path(__file__).resolve().parent.parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if "Traceback" in run.stderr:  # not the known gap: a crash (not the expected failure)
        raise RuntimeError(run.stderr[-2000:])
    assert run.returncode == 0, run.stdout[-2000:]


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("encoding", [PROTOBUF, JSON])
async def test_every_case_reconstructed_exactly(flavor: str, encoding: str, capture: None):
    memory = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    with instrumented(flavor, tp):
        truths = await play(flavor, tp, cases_for(flavor), flavor)
    finished = list(memory.get_finished_spans())
    if encoding == PROTOBUF:
        body = encode_spans(finished).SerializeToString()
    else:
        body = str(json_spans(finished).to_json()).encode()
    mapped = map_spans(decode_request(body, encoding), MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    got = by_conversation(mapped)
    assert set(got) == set(truths)
    for cid, truth in truths.items():
        assert settled(cid, got[cid]) == settled(cid, truth.entries), cid


async def test_traceloop_anthropic_streaming_counts_one_output_token_too_many(capture: None):
    """Traceloop's anthropic 0.62.4 on a streamed call (CASE_GAPS): every message, call and
    result stored exactly, but each call's output tokens are the instrumentation's, which adds
    ``message_start``'s count (1, as the API sends it) to ``message_delta``'s cumulative one.
    The monitor stores the count it is given; this test fails once the instrumentation is
    fixed (then drop the gap)."""
    from tests.otel.support_agent import cases

    memory = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    with instrumented("anthropic_ll", tp):
        case = [c for c in cases() if c.name == "streaming"]
        truths = await play("anthropic_ll", tp, case, "anthropic_ll")
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    mapped = map_spans(decode_request(body, PROTOBUF), MappingConfig())
    (cid, truth), got = *truths.items(), by_conversation(mapped)
    want = [(*e[:4], (e[4][0], e[4][1] + 1)) if e[0] == "assistant" else e for e in truth.entries]
    assert [e[0] for e in want].count("assistant") == 2
    assert got == {cid: want}


async def play_sub_agent(tp: TracerProvider, cid: str) -> list[tuple[str, tuple[Any, ...]]]:
    with instrumented("agents", tp):
        async with Provider() as provider:
            return await run_sub_agent_as_tool(provider, tp, cid)


def by_agent(events: list[dict[str, Any]]) -> list[tuple[str, tuple[Any, ...]]]:
    """(agent id, transcript entry) in the transcript's order."""
    ordered = sorted(events, key=lambda e: (datetime.fromisoformat(e["ts"]), e["event_id"]))
    return list(zip([e["agent"]["id"] for e in ordered], transcript(ordered), strict=True))


async def test_a_sub_agent_used_as_a_tool_speaks_under_its_own_agent_id():
    """The Agents SDK's ``agent.as_tool``: the sub-agent runs inside the calling agent's tool
    span. Its system prompt, its input (as its user message), its calls, their results and its
    answer are its own; the call of the tool and the tool's result (the sub-agent's answer,
    as the calling model was given it) are the calling agent's; one conversation, in order."""
    memory = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    truth = await play_sub_agent(tp, "sub-agent-1")
    assert [a for a, _ in truth] == ["support"] * 3 + ["orders"] * 5 + ["support"] * 2
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    mapped = map_spans(decode_request(body, PROTOBUF), MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    events = [json.loads(e.to_json()) for e in mapped.events]
    assert {e["conversation_id"] for e in events} == {"sub-agent-1"}
    assert by_agent(events) == truth


@pytest.fixture
async def worker(
    broker: Any, topic_name: str, database_url: str, tmp_path: Path
) -> AsyncIterator[WorkerProcess]:
    await create_topic(broker.bootstrap, topic_name)
    w = start_worker(broker, database_url, topic_name, tmp_path)
    try:
        await w.wait_ready()
        yield w
    finally:
        w.stop()


def grpc_exporter(worker: WorkerProcess) -> SpanExporter:
    headers = (("authorization", f"Bearer {TOKEN}"),)
    return GrpcExporter(
        worker.grpc_target, insecure=True, headers=headers, compression=grpc.Compression.Gzip
    )


@pytest.mark.parametrize("transport", ["http", "grpc"])
async def test_every_api_stored_exactly_over_each_transport(
    worker: WorkerProcess, database_url: str, transport: str, capture: None
):
    """Every API flavor's every case and pydantic-ai's, and the Agents SDK's sub-agent used
    as a tool (each message under its agent), through the real worker, each trace over several
    requests (batches of 2 spans); OTLP/HTTP protobuf + gzip, or OTLP/gRPC + gzip."""
    out = exporter(worker, "protobuf") if transport == "http" else grpc_exporter(worker)
    tp = TracerProvider(resource=Resource.create({"service.name": f"apis-{transport}"}))
    tp.add_span_processor(
        BatchSpanProcessor(out, max_export_batch_size=2, schedule_delay_millis=50)
    )
    truths: dict[str, Any] = {}
    for flavor in FLAVORS:
        with instrumented(flavor, tp):
            truths |= await play(flavor, tp, cases_for(flavor), f"{flavor}-{transport}")
    sub = await play_sub_agent(tp, f"sub-agent-{transport}")  # the Agents SDK's as_tool
    assert await asyncio.to_thread(tp.force_flush, 30_000)
    want = sum(len(t.entries) for t in truths.values()) + len(sub)
    assert await wait_for_count(database_url, want, stable_s=1.5) == want
    got = await stored(database_url)
    assert by_agent(got.pop(f"sub-agent-{transport}")) == sub
    assert set(got) == set(truths)
    for cid, truth in truths.items():
        assert settled(cid, transcript(got[cid])) == settled(cid, truth.entries), cid
    await asyncio.to_thread(tp.shutdown)
