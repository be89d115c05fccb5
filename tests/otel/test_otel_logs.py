"""Content in OTLP log records end to end: openai-v2 (event-only and span-and-event modes) ->
the official OTel SDK, ``OTLPSpanExporter`` and ``OTLPLogExporter`` -> the real worker's
``/v1/traces`` and ``/v1/logs`` -> Kafka -> Postgres, compared with what the agent really did.

``BatchSpanProcessor`` and ``BatchLogRecordProcessor`` with small batches split each trace and
its GenAI events (``gen_ai.client.inference.operation.details``) over several requests of both
signals, in whatever order the two processors send them; in event-only mode the text of every
message, tool call and tool result is only in the log records. Then the same trace split by
hand, delivered logs first and spans first, across a worker restart.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.json.http._log_exporter import (
    OTLPLogExporter as JsonLogExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    InMemoryLogRecordExporter,
    LogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.otel.conformance import cases_for, instrumented, play
from tests.otel.support_agent import cases
from tests.otel.test_otel_conformance import (
    TOKEN,
    assert_exact,
    exporter,
    gauge,
    metric,
    start_worker,
    stored,
)
from tests.servers.worker import WorkerProcess, count, create_topic, wait_for_count


def log_exporter(worker: WorkerProcess, encoding: str) -> LogRecordExporter:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if encoding == "protobuf":
        return OTLPLogExporter(
            f"{worker.url}/v1/logs", headers=headers, compression=Compression.Gzip
        )
    return JsonLogExporter(f"{worker.url}/v1/logs", headers=headers)


@pytest.fixture
def opt_in(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    return monkeypatch


async def wait_idle(worker: WorkerProcess) -> None:
    """Until nothing waits in the assembly (spans or log records)."""
    for _ in range(100):
        spans = gauge(worker, "monitor_otlp_pending_spans")
        records = gauge(worker, "monitor_otlp_pending_log_records")
        if spans == 0 and records == 0:
            return
        await asyncio.sleep(0.2)
    raise AssertionError("spans or log records still waiting")


@pytest.mark.parametrize(
    ("mode", "encoding"), [("EVENT_ONLY", "protobuf"), ("SPAN_AND_EVENT", "json")]
)
async def test_content_in_log_records_stored_exactly_over_both_signals(
    broker: Any,
    topic_name: str,
    database_url: str,
    tmp_path: Path,
    opt_in: pytest.MonkeyPatch,
    mode: str,
    encoding: str,
):
    opt_in.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode)
    await create_topic(broker.bootstrap, topic_name)
    worker = start_worker(broker, database_url, topic_name, tmp_path)
    try:
        await worker.wait_ready()
        resource = Resource.create({"service.name": "logs-svc"})
        spans_memory, logs_memory = InMemorySpanExporter(), InMemoryLogRecordExporter()
        tp, lp = TracerProvider(resource=resource), LoggerProvider(resource=resource)
        tp.add_span_processor(SimpleSpanProcessor(spans_memory))
        lp.add_log_record_processor(SimpleLogRecordProcessor(logs_memory))
        tp.add_span_processor(
            BatchSpanProcessor(
                exporter(worker, encoding), max_export_batch_size=2, schedule_delay_millis=50
            )
        )
        lp.add_log_record_processor(
            BatchLogRecordProcessor(
                log_exporter(worker, encoding), max_export_batch_size=2, schedule_delay_millis=50
            )
        )
        with instrumented("genai", tp, lp):
            truths = await play("genai", tp, cases_for("genai"), f"lg-{mode}")
        assert await asyncio.to_thread(tp.force_flush, 30_000)
        assert await asyncio.to_thread(lp.force_flush, 30_000)
        records = list(logs_memory.get_finished_logs())
        assert len(records) > 2 * len(truths)  # an operation details record per LLM call
        want = sum(len(t.entries) for t in truths.values())
        assert await wait_for_count(database_url, want, stable_s=1.5) == want
        assert_exact(truths, await stored(database_url))
        await wait_idle(worker)

        # both signals sent again (an exporter retry): nothing changes
        spans: list[ReadableSpan] = list(spans_memory.get_finished_spans())
        assert await asyncio.to_thread(exporter(worker, encoding).export, spans) == (
            SpanExportResult.SUCCESS
        )
        again = log_exporter(worker, encoding)
        assert await asyncio.to_thread(again.export, records) == LogRecordExportResult.SUCCESS
        await asyncio.sleep(2.0)
        assert await count(database_url) == want
        assert_exact(truths, await stored(database_url))
        joined = metric(worker, "monitor_otlp_log_records_total", "result", "joined")
        late = metric(worker, "monitor_otlp_log_records_total", "result", "late")
        waiting = metric(worker, "monitor_otlp_log_records_total", "result", "waiting")
        assert joined + late + waiting == 2 * len(records)
        assert late >= len(records)  # the second time every trace was mapped already
        assert metric(worker, "monitor_otlp_log_records_total", "result", "dropped") == 0
        assert metric(worker, "monitor_otlp_traces_total", "how", "deadline") == 0
        await wait_idle(worker)
    finally:
        worker.stop()


@pytest.mark.slow  # a worker restart between the halves of traces (~20 s)
async def test_one_trace_over_both_signals_in_any_order_across_a_restart(
    broker: Any, topic_name: str, database_url: str, tmp_path: Path, opt_in: pytest.MonkeyPatch
):
    """Event-only content: per conversation, the spans and the log records split in parts,
    delivered logs first (then the spans without their root, the root after the restart),
    spans first (every span, root included, before the restart; the records after it), and
    half of each before and after; the stored transcripts equal the conversations, as when
    each conversation arrives in one request."""
    opt_in.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "EVENT_ONLY")
    await create_topic(broker.bootstrap, topic_name)
    spans_memory, logs_memory = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tp, lp = TracerProvider(), LoggerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans_memory))
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs_memory))
    chosen = [c for c in cases() if c.name in ("tool_loop", "failing_tool", "parallel_tools")]
    with instrumented("genai", tp, lp):
        truths = await play("genai", tp, chosen, "rl")
    spans = list(spans_memory.get_finished_spans())
    records = list(logs_memory.get_finished_logs())

    def trace_of(case: str) -> int:
        return next(
            s.context.trace_id
            for s in spans
            if s.parent is None
            and s.attributes
            and s.attributes.get("gen_ai.conversation.id") == f"rl-{case}"
        )

    def spans_of(case: str, roots: bool | None = None) -> list[ReadableSpan]:
        trace = [s for s in spans if s.context.trace_id == trace_of(case)]
        return [s for s in trace if roots is None or (s.parent is None) == roots]

    def records_of(case: str) -> list[ReadableLogRecord]:
        return [r for r in records if r.log_record.trace_id == trace_of(case)]

    def send(worker: WorkerProcess, part: list[Any]) -> None:
        if part and isinstance(part[0], ReadableSpan):
            assert exporter(worker, "protobuf").export(part) == SpanExportResult.SUCCESS
        else:
            result = log_exporter(worker, "protobuf").export(part)
            assert result == LogRecordExportResult.SUCCESS

    logs_first, spans_first, halves = "tool_loop", "failing_tool", "parallel_tools"
    half = len(records_of(halves)) // 2
    before = [
        records_of(logs_first),
        spans_of(logs_first, roots=False),
        spans_of(spans_first),
        records_of(halves)[:half],
        spans_of(halves, roots=False),
    ]
    after = [
        spans_of(logs_first, roots=True),
        records_of(spans_first),
        records_of(halves)[half:],
        spans_of(halves, roots=True),
    ]
    env = {
        "MONITOR_OTEL_CONTENT_WAIT_SECONDS": "300"
    }  # the spans-first trace waits out the restart
    first = start_worker(broker, database_url, topic_name, tmp_path, **env)
    try:
        await first.wait_ready()
        for part in before:
            await asyncio.to_thread(send, first, part)
        waiting = sum(len(p) for p in before if p and isinstance(p[0], ReadableSpan))
        for _ in range(100):
            if gauge(first, "monitor_otlp_pending_spans") == waiting:
                break
            await asyncio.sleep(0.2)
        assert gauge(first, "monitor_otlp_pending_spans") == waiting
        assert (
            gauge(first, "monitor_otlp_pending_log_records") == len(records_of(logs_first)) + half
        )
        assert await count(database_url) == 0
    finally:
        first.stop()
    second = start_worker(broker, database_url, topic_name, tmp_path, **env)
    try:
        await second.wait_ready()
        for part in after:
            await asyncio.to_thread(send, second, part)
        want = sum(len(t.entries) for t in truths.values())
        assert await wait_for_count(database_url, want, stable_s=1.5) == want
        assert_exact(truths, await stored(database_url))
        assert metric(second, "monitor_otlp_traces_total", "how", "root") == 3
        await wait_idle(second)
    finally:
        second.stop()
