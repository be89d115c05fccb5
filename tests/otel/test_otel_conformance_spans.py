"""Conformance of the transcript reconstruction on the spans the real instrumentations emit.

The support agent (tests/otel/support_agent.py) plays every case against the loopback provider
under ``opentelemetry-instrumentation-openai-v2`` + util-genai and under
``openinference-instrumentation-openai``; the spans go through the official OTLP encoders
(protobuf and JSON) and the monitor's decoder, then the mapping. Per conversation, the
reconstructed transcript must equal what the agent really sent and received. The end-to-end
path (worker, Kafka, Postgres, split exports, restarts) is tests/otel/test_otel_conformance.py.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from opentelemetry.exporter.otlp.json.common._log_encoder import encode_logs as json_logs
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as json_spans
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.otel.decode import JSON, PROTOBUF, decode_request
from monitor.otel.decode_logs import decode_logs
from monitor.otel.log_events import GENAI_EVENTS, by_span
from monitor.otel.mapping import MappingConfig, map_spans
from monitor.otel.traces import joined
from tests.otel.conformance import FLAVORS, LEGACY, cases_for, instrumented, play, transcript


@pytest.fixture(params=["SPAN_ONLY", "SPAN_AND_EVENT"])
def capture(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", request.param)
    return str(request.param)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("encoding", [PROTOBUF, JSON])
async def test_every_case_reconstructed_exactly(flavor: str, encoding: str, capture: str):
    memory = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    with instrumented(flavor, tp):
        truths = await play(flavor, tp, cases_for(flavor), flavor)
    finished = list(memory.get_finished_spans())
    if encoding == PROTOBUF:
        body = encode_spans(finished).SerializeToString()
    else:
        body = str(json_spans(finished).to_json()).encode()  # what the JSON exporter posts
    spans = decode_request(body, encoding)
    mapped = map_spans(spans, MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    by_conv: dict[str, list[dict]] = {}
    unique: dict[str, Any] = {}
    for e in mapped.events:  # the first of an id, as the store keeps it
        unique.setdefault(e.event_id, e)
    for e in unique.values():
        by_conv.setdefault(e.conversation_id, []).append(json.loads(e.to_json()))
    assert set(by_conv) == set(truths)
    for cid, truth in truths.items():
        assert transcript(by_conv[cid]) == truth.entries, cid
    # one event id twice only for what a conversation's later trace repeats: its system prompt
    counts: dict[str, int] = {}
    for e in mapped.events:
        counts[e.event_id] = counts.get(e.event_id, 0) + 1
    assert all(":system:" in i for i, n in counts.items() if n > 1), counts


@pytest.mark.parametrize(
    ("flavor", "mode"),
    [("genai", "EVENT_ONLY"), ("genai", "SPAN_AND_EVENT"), (LEGACY, "true")],
)
@pytest.mark.parametrize("encoding", [PROTOBUF, JSON])
async def test_content_in_log_records_joined_exactly(
    flavor: str, mode: str, encoding: str, monkeypatch: pytest.MonkeyPatch
):
    """openai-v2 with its content in GenAI log events (the inference operation details of the
    latest conventions, or the legacy per-message events), encoded by the official OTLP log
    encoders: the spans joined to the decoded records give the exact transcript; in
    EVENT_ONLY mode the spans alone carry no text at all."""
    if flavor != LEGACY:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode)
    memory, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tp, lp = TracerProvider(), LoggerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    with instrumented(flavor, tp, lp):
        truths = await play(flavor, tp, cases_for(flavor), flavor)
    finished, records = list(memory.get_finished_spans()), list(logs.get_finished_logs())
    if encoding == PROTOBUF:
        spans = decode_request(encode_spans(finished).SerializeToString(), encoding)
        batch = decode_logs(encode_logs(records).SerializeToString(), encoding)
    else:
        spans = decode_request(str(json_spans(finished).to_json()).encode(), encoding)
        batch = decode_logs(str(json_logs(records).to_json()).encode(), encoding)
    assert batch.rejected == [] and batch.other == 0
    assert {e.name for e in batch.events} <= GENAI_EVENTS and len(batch.events) == len(records)
    mapped = map_spans(joined(spans, by_span(batch.events)), MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    assert by_conversation(mapped) == {cid: t.entries for cid, t in truths.items()}
    alone = map_spans(spans, MappingConfig())
    texts = [e for e in alone.events if e.type == "message" and e.message.content]
    if mode == "EVENT_ONLY":
        assert texts == []  # the content is in the log records only


def by_conversation(mapped: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Each conversation's transcript (the first event of an id, as the store keeps it)."""
    unique: dict[str, Any] = {}
    for e in mapped.events:
        unique.setdefault(e.event_id, e)
    out: dict[str, list[dict[str, Any]]] = {}
    for e in unique.values():
        out.setdefault(e.conversation_id, []).append(json.loads(e.to_json()))
    return {cid: transcript(events) for cid, events in out.items()}


async def test_agents_sdk_handoff_to_a_tool_using_agent(monkeypatch: pytest.MonkeyPatch):
    """The OpenAI Agents SDK: a triage agent hands the conversation to a refunds agent that
    calls a tool and answers. The handoff span has no tool call id and another name than the
    call: it still answers that call, once, with what the model was given; each message is
    its agent's; the refunds agent's own system prompt is stored when it takes over."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI
    from openinference.instrumentation import using_session

    from tests.otel.provider import Answer, Call, Provider
    from tests.otel.support_agent import run_tool

    memory = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))

    @function_tool
    def lookup_order(order: str) -> str:
        """lookup_order tool"""
        return run_tool("lookup_order", {"order": order}, frozenset())

    with instrumented("agents", tp):
        async with Provider() as provider:
            client = AsyncOpenAI(base_url=provider.base_url, api_key="k", max_retries=0)
            model = OpenAIChatCompletionsModel(model="m", openai_client=client)
            refunds = Agent(
                name="refunds",
                instructions="You handle refunds.",
                tools=[lookup_order],
                model=model,
            )
            triage = Agent(
                name="triage", instructions="Route the user.", handoffs=[refunds], model=model
            )
            provider.push(
                Answer(None, (Call("call_h", "transfer_to_refunds", {}),), 10, 2, "r1"),
                Answer(None, (Call("call_l", "lookup_order", {"order": "A-17"}),), 20, 4, "r2"),
                Answer("Refund for A-17 issued.", (), 30, 6, "r3"),
            )
            with using_session("handoff-1"):
                result = await Runner.run(triage, "Refund my order A-17")
            wire = [body["messages"] for body in provider.requests]
            await client.close()
    assert result.final_output == "Refund for A-17 issued."
    handoff, lookup = wire[1][3], wire[2][5]  # the tool messages the model was given
    assert (handoff["tool_call_id"], lookup["tool_call_id"]) == ("call_h", "call_l")
    truth = [
        ("triage", ("system", wire[0][0]["content"])),
        ("triage", ("user", "Refund my order A-17")),
        ("triage", ("assistant", None, (("call_h", "transfer_to_refunds", "{}"),), "m", (10, 2))),
        (
            "triage",
            ("tool_result", "call_h", "transfer_to_refunds", True, handoff["content"], None),
        ),
        ("refunds", ("system", wire[1][0]["content"])),
        (
            "refunds",
            ("assistant", None, (("call_l", "lookup_order", '{"order": "A-17"}'),), "m", (20, 4)),
        ),
        ("refunds", ("tool_result", "call_l", "lookup_order", True, lookup["content"], None)),
        ("refunds", ("assistant", "Refund for A-17 issued.", (), "m", (30, 6))),
    ]
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    mapped = map_spans(decode_request(body, PROTOBUF), MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    events = sorted(
        (json.loads(e.to_json()) for e in {e.event_id: e for e in mapped.events}.values()),
        key=lambda e: (datetime.fromisoformat(e["ts"]), e["event_id"]),  # as transcript()
    )
    assert {e["conversation_id"] for e in events} == {"handoff-1"}
    assert transcript(events) == [entry for _, entry in truth]
    assert [e["agent"]["id"] for e in events] == [agent for agent, _ in truth]
