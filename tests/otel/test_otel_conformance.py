"""Conformance end to end: real instrumentations -> official OTel SDK and OTLP/HTTP exporters ->
the real worker's /v1/traces -> Kafka -> Postgres, compared with what the agent really did.

The support agent (tests/otel/support_agent.py) plays every case against the loopback provider;
a ``BatchSpanProcessor`` with ``max_export_batch_size=2`` splits each trace over several export
requests, the root span (which alone names the GenAI conversation) last; then the whole set is
exported once more (an exporter retry). Per conversation the stored events, read back from
Postgres, must equal the agent's ground truth: roles, contents, tool names, arguments, call ids,
results, ok flags, errors, order, model and tokens.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.otel.conformance import cases_for, instrumented, play, transcript
from tests.otel.support_agent import Truth, cases
from tests.servers.worker import WorkerProcess, count, create_topic, create_topics, wait_for_count

TOKEN = "conf-s3cret"


def exporter(worker: WorkerProcess, encoding: str) -> SpanExporter:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if encoding == "protobuf":
        return OTLPSpanExporter(
            f"{worker.url}/v1/traces", headers=headers, compression=Compression.Gzip
        )
    return JsonExporter(f"{worker.url}/v1/traces", headers=headers)


def metric(worker: WorkerProcess, name: str, label: str, value: str) -> float:
    for line in httpx.get(f"{worker.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f'{name}{{{label}="{value}"}} '):
            return float(line.split()[-1])
    return 0.0


def gauge(worker: WorkerProcess, name: str) -> float:
    for line in httpx.get(f"{worker.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[-1])
    return -1.0


async def stored(database_url: str) -> dict[str, list[dict[str, Any]]]:
    import asyncpg

    from monitor.store.engine import libpq_url

    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        out: dict[str, list[dict[str, Any]]] = {}
        for r in await conn.fetch("SELECT conversation_id, body FROM events"):
            body = r["body"]
            out.setdefault(r["conversation_id"], []).append(
                json.loads(body) if isinstance(body, str) else body
            )
        return out
    finally:
        await conn.close()


async def conversation_rows(database_url: str) -> dict[str, dict[str, Any]]:
    import asyncpg

    from monitor.store.engine import libpq_url

    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        rows = await conn.fetch("SELECT * FROM conversations")
        return {r["conversation_id"]: dict(r) for r in rows}
    finally:
        await conn.close()


def start_worker(
    broker: Any, database_url: str, topic: str, tmp_path: Path, **env: str
) -> WorkerProcess:
    return WorkerProcess(
        broker.bootstrap,
        database_url,
        topic,
        tmp_path,
        MONITOR_INGEST_TOKEN=TOKEN,
        MONITOR_JUDGE_ENABLED="false",
        MONITOR_ALERTING_ENABLED="false",
        MONITOR_OTEL_SWEEP_SECONDS="1",
        **env,
    ).start()


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


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_AND_EVENT")


def assert_exact(truths: dict[str, Truth], got: dict[str, list[dict[str, Any]]]) -> None:
    assert set(got) == set(truths)
    for cid, truth in truths.items():
        assert transcript(got[cid]) == truth.entries, cid


def failures(truth: Truth) -> int:
    return sum(
        1 for e in truth.entries if e[0] == "llm_error" or (e[0] == "tool_result" and e[3] is False)
    )


@pytest.mark.parametrize(
    ("flavor", "encoding"),
    [("genai", "protobuf"), ("openinference", "json"), ("agents", "protobuf")],
)
async def test_every_conversation_stored_exactly_across_split_and_repeated_exports(
    worker: WorkerProcess, database_url: str, flavor: str, encoding: str, capture: None
):
    memory = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": f"{flavor}-svc"}))
    tp.add_span_processor(SimpleSpanProcessor(memory))
    tp.add_span_processor(
        BatchSpanProcessor(
            exporter(worker, encoding), max_export_batch_size=2, schedule_delay_millis=50
        )
    )
    with instrumented(flavor, tp):
        truths = await play(flavor, tp, cases_for(flavor), flavor)
    assert await asyncio.to_thread(tp.force_flush, 30_000)
    spans: list[ReadableSpan] = list(memory.get_finished_spans())
    traces = {s.context.trace_id for s in spans}
    assert len(traces) >= len(truths)  # the Agents SDK makes a trace per user turn
    # most traces outgrow a batch of 2 spans: they arrive over several requests, root last
    sizes = [sum(s.context.trace_id == t for s in spans) for t in traces]
    assert sum(n > 2 for n in sizes) >= len(traces) - 2
    want = sum(len(t.entries) for t in truths.values())
    assert await wait_for_count(database_url, want, stable_s=1.5) == want
    assert_exact(truths, await stored(database_url))

    # the same export sent again (an exporter retry): nothing changes
    again = exporter(worker, encoding)
    assert await asyncio.to_thread(again.export, spans) == SpanExportResult.SUCCESS
    await asyncio.sleep(2.0)
    assert await count(database_url) == want
    assert_exact(truths, await stored(database_url))

    convs = await conversation_rows(database_url)
    for cid, truth in truths.items():
        assert convs[cid]["tool_errors"] == failures(truth), cid
        assistants = sum(e[0] == "assistant" for e in truth.entries)
        assert convs[cid]["assistant_messages"] == assistants, cid
    llm_errors = sum(e[0] == "llm_error" for t in truths.values() for e in t.entries)
    tool_errors = sum(
        e[0] == "tool_result" and e[3] is False for t in truths.values() for e in t.entries
    )
    name = "monitor_otlp_failures_total"
    assert metric(worker, name, "kind", "llm_call") == 2 * llm_errors  # sent twice
    assert metric(worker, name, "kind", "tool") == 2 * tool_errors
    assert metric(worker, "monitor_otlp_traces_total", "how", "root") >= len(truths)
    assert metric(worker, "monitor_otlp_traces_total", "how", "deadline") == 0
    assert metric(worker, "monitor_otlp_spans_total", "result", "waiting") > 0
    for _ in range(50):
        if gauge(worker, "monitor_otlp_pending_spans") == 0:
            break
        await asyncio.sleep(0.2)
    assert gauge(worker, "monitor_otlp_pending_spans") == 0


@pytest.mark.slow  # a worker restart between the halves of traces (~20 s)
async def test_traces_split_across_a_worker_restart_over_http_and_the_traces_topic(
    broker: Any, topic_name: str, database_url: str, tmp_path: Path, capture: None
):
    """Part of each trace before a restart, the rest after: over /v1/traces with the root
    last and with the root first, and over the Kafka traces topic; every transcript exact."""
    from aiokafka import AIOKafkaProducer
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    traces_topic = f"{topic_name}.otlp"
    await create_topic(broker.bootstrap, topic_name)
    await create_topics(broker.bootstrap, (traces_topic, 1))
    memory = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "restart-svc"}))
    tp.add_span_processor(SimpleSpanProcessor(memory))
    chosen = [c for c in cases() if c.name in ("tool_loop", "failing_tool", "parallel_tools")]
    with instrumented("genai", tp):
        truths = await play("genai", tp, chosen, "rs")
    spans = list(memory.get_finished_spans())

    def part(case: str, roots: bool) -> list[ReadableSpan]:
        root = next(
            s
            for s in spans
            if s.parent is None
            and s.attributes
            and s.attributes.get("gen_ai.conversation.id") == f"rs-{case}"
        )
        trace = [s for s in spans if s.context.trace_id == root.context.trace_id]
        return [s for s in trace if (s.parent is None) == roots]

    async def to_topic(batch: list[ReadableSpan]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(traces_topic, encode_spans(batch).SerializeToString())
        finally:
            await producer.stop()

    env = {"MONITOR_TOPIC_TRACES": traces_topic}
    first = start_worker(broker, database_url, topic_name, tmp_path, **env)
    try:
        await first.wait_ready()
        http = exporter(first, "protobuf")
        assert http.export(part("tool_loop", False)) == SpanExportResult.SUCCESS
        assert http.export(part("failing_tool", True)) == SpanExportResult.SUCCESS  # root first
        await to_topic(part("parallel_tools", False))
        waiting = len(part("tool_loop", False)) + 1 + len(part("parallel_tools", False))
        for _ in range(100):
            if gauge(first, "monitor_otlp_pending_spans") == waiting:
                break
            await asyncio.sleep(0.2)
        assert gauge(first, "monitor_otlp_pending_spans") == waiting
        assert await count(database_url) == 0
    finally:
        first.stop()
    second = start_worker(broker, database_url, topic_name, tmp_path, **env)
    try:
        await second.wait_ready()
        http = exporter(second, "protobuf")
        assert http.export(part("tool_loop", True)) == SpanExportResult.SUCCESS
        assert http.export(part("failing_tool", False)) == SpanExportResult.SUCCESS
        await to_topic(part("parallel_tools", True))
        want = sum(len(t.entries) for t in truths.values())
        assert await wait_for_count(database_url, want, stable_s=1.5) == want
        assert_exact(truths, await stored(database_url))
        assert metric(second, "monitor_otlp_traces_total", "how", "root") == 3
    finally:
        second.stop()
