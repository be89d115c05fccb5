"""OTLP/gRPC on the real stack (worker + broker + Postgres): the official gRPC exporters
(``opentelemetry-exporter-otlp-proto-grpc``, gzip) carry openai-v2's spans and its GenAI log
records (event-only content) to the worker's receiver, and every conversation is stored exactly;
bad input gets the status code the OTLP specification maps it to, one test each: an oversize
message, an undecodable one, a gzip bomb (refused without being inflated whole), no or a wrong
token, a stranger flooding with bad tokens (RESOURCE_EXHAUSTED with RetryInfo); ``/health`` and
``/metrics`` tell the truth after each. The event bus refusing (UNAVAILABLE with RetryInfo) is
tested on an in-process server over the real ``receive_traces``."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.contract.events import AgentEvent
from monitor.core.errors import MonitorError
from monitor.otel.grpc_receiver import LOGS_SERVICE, TRACE_SERVICE, grpc_server
from monitor.otel.mapping import MappingConfig
from monitor.otel.receiver import TraceLimits, receive_traces
from tests.otel.conformance import cases_for, instrumented, play
from tests.otel.test_otel_conformance import TOKEN, assert_exact, metric, start_worker, stored
from tests.otel.test_otel_receiver import authorize, open_guard, sdk_spans
from tests.servers.worker import WorkerProcess, create_topic, wait_for_count

TRACES = f"/{TRACE_SERVICE}/Export"
LOGS = f"/{LOGS_SERVICE}/Export"
MAX_BODY = 256 * 1024  # the worker's MONITOR_HTTP_MAX_BODY_BYTES in the bad-input tests


@pytest.fixture
async def worker(
    broker: Any, topic_name: str, database_url: str, tmp_path: Path
) -> AsyncIterator[WorkerProcess]:
    await create_topic(broker.bootstrap, topic_name)
    w = start_worker(
        broker,
        database_url,
        topic_name,
        tmp_path,
        MONITOR_HTTP_MAX_BODY_BYTES=str(MAX_BODY),
        MONITOR_HTTP_UNAUTH_RATE_PER_S="0.01",
        MONITOR_HTTP_UNAUTH_RATE_BURST="3",
    )
    try:
        await w.wait_ready()
        yield w
    finally:
        w.stop()


async def call(
    target: str, method: str, body: bytes, token: str | None = TOKEN, **options: Any
) -> tuple[grpc.StatusCode, str, dict[str, Any], bytes | None]:
    """One raw unary call (the message as bytes): its code, details, trailing metadata and,
    on OK, the response bytes."""
    async with grpc.aio.insecure_channel(
        target, options=[("grpc.max_send_message_length", 512 * 1024 * 1024)]
    ) as channel:
        stub = channel.unary_unary(method)
        metadata = () if token is None else (("authorization", f"Bearer {token}"),)
        try:
            response = await stub(body, metadata=metadata, timeout=30, **options)
        except grpc.aio.AioRpcError as exc:
            trailing = dict(exc.trailing_metadata() or ())
            return exc.code(), exc.details() or "", trailing, None
        return grpc.StatusCode.OK, "", {}, response


def healthy(worker: WorkerProcess) -> bool:
    return httpx.get(f"{worker.url}/health", timeout=10).status_code == 200


def grpc_errors(worker: WorkerProcess, method: str, code: str) -> float:
    text = httpx.get(f"{worker.url}/metrics", timeout=10).text
    line = f'monitor_otlp_grpc_errors_total{{code="{code}",method="{method}"}} '
    return next((float(x.split()[-1]) for x in text.splitlines() if x.startswith(line)), 0.0)


def peak_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(x for x in f if x.startswith("VmHWM")).split()[1])


async def test_official_grpc_exporters_store_every_conversation_exactly(
    worker: WorkerProcess, database_url: str, monkeypatch: pytest.MonkeyPatch
):
    """openai-v2 with its content in log records only (EVENT_ONLY): spans and records over
    gRPC with gzip, in batches of 2 (each trace over several calls of both services)."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "EVENT_ONLY")
    headers = (("authorization", f"Bearer {TOKEN}"),)
    gz = grpc.Compression.Gzip
    span_out = OTLPSpanExporter(worker.grpc_target, insecure=True, headers=headers, compression=gz)
    log_out = OTLPLogExporter(worker.grpc_target, insecure=True, headers=headers, compression=gz)
    resource = Resource.create({"service.name": "grpc-svc"})
    memory = InMemorySpanExporter()
    tp, lp = TracerProvider(resource=resource), LoggerProvider(resource=resource)
    tp.add_span_processor(SimpleSpanProcessor(memory))
    tp.add_span_processor(
        BatchSpanProcessor(span_out, max_export_batch_size=2, schedule_delay_millis=50)
    )
    lp.add_log_record_processor(
        BatchLogRecordProcessor(log_out, max_export_batch_size=2, schedule_delay_millis=50)
    )
    with instrumented("genai", tp, lp):
        truths = await play("genai", tp, cases_for("genai"), "grpc")
    assert await asyncio.to_thread(tp.force_flush, 30_000)
    assert await asyncio.to_thread(lp.force_flush, 30_000)
    want = sum(len(t.entries) for t in truths.values())
    assert await wait_for_count(database_url, want, stable_s=1.5) == want
    assert_exact(truths, await stored(database_url))
    assert metric(worker, "monitor_otlp_log_records_total", "result", "joined") > 0
    assert metric(worker, "monitor_otlp_traces_total", "how", "root") >= len(truths)
    assert healthy(worker)
    await asyncio.to_thread(tp.shutdown)
    await asyncio.to_thread(lp.shutdown)


@pytest.mark.parametrize("flavor", ["openinference", "agents"])
async def test_span_only_instrumentations_over_grpc_store_every_conversation_exactly(
    flavor: str, worker: WorkerProcess, database_url: str
):
    """OpenInference on the openai client, and the Agents SDK under OpenInference's
    instrumentor, exported with the official gRPC span exporter (gzip, batches of 2: each
    trace over several calls): every conversation stored exactly, as over HTTP."""
    headers = (("authorization", f"Bearer {TOKEN}"),)
    out = OTLPSpanExporter(
        worker.grpc_target, insecure=True, headers=headers, compression=grpc.Compression.Gzip
    )
    tp = TracerProvider(resource=Resource.create({"service.name": f"grpc-{flavor}"}))
    tp.add_span_processor(
        BatchSpanProcessor(out, max_export_batch_size=2, schedule_delay_millis=50)
    )
    with instrumented(flavor, tp):
        truths = await play(flavor, tp, cases_for(flavor), f"grpc-{flavor}")
    assert await asyncio.to_thread(tp.force_flush, 30_000)
    want = sum(len(t.entries) for t in truths.values())
    assert await wait_for_count(database_url, want, stable_s=1.5) == want
    assert_exact(truths, await stored(database_url))
    assert grpc_errors(worker, TRACES, "INVALID_ARGUMENT") == 0
    assert healthy(worker)
    await asyncio.to_thread(tp.shutdown)


async def test_an_oversize_message_is_resource_exhausted(worker: WorkerProcess):
    code, details, trailing, _ = await call(worker.grpc_target, TRACES, b"\x0a" * (MAX_BODY + 1))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details
    assert "google.rpc.retryinfo-bin" not in trailing  # not worth retrying
    assert healthy(worker)


async def test_an_undecodable_message_is_invalid_argument(worker: WorkerProcess):
    for method in (TRACES, LOGS):
        code, details, trailing, _ = await call(worker.grpc_target, method, b"\xff\xff\xff")
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "not an OTLP" in details
        status = status_pb2.Status.FromString(trailing["grpc-status-details-bin"])
        assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert grpc_errors(worker, method, "INVALID_ARGUMENT") == 1
    assert healthy(worker)


async def test_a_gzip_bomb_is_refused_without_being_inflated(worker: WorkerProcess):
    assert worker.proc is not None
    before = peak_rss_kb(worker.proc.pid)
    bomb = b"\x00" * (128 * 1024 * 1024)  # 128 MiB of zeros: ~128 KiB gzipped (1000:1)
    assert len(gzip.compress(bomb[: 1 << 20])) * 128 < MAX_BODY
    code, details, _, _ = await call(
        worker.grpc_target, TRACES, bomb, compression=grpc.Compression.Gzip
    )
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details
    assert peak_rss_kb(worker.proc.pid) - before < 32 * 1024  # never inflated whole
    assert healthy(worker)


async def test_no_or_a_wrong_token_is_unauthenticated(worker: WorkerProcess):
    body = bytes(encode_spans(sdk_spans(1)).SerializeToString())
    for token in (None, "wrong"):
        code, details, _, _ = await call(worker.grpc_target, TRACES, body, token=token)
        assert code == grpc.StatusCode.UNAUTHENTICATED and "bearer" in details.lower()
    code, _, _, response = await call(worker.grpc_target, TRACES, body)
    assert code == grpc.StatusCode.OK and response is not None
    assert not ExportTraceServiceResponse.FromString(response).HasField("partial_success")
    assert grpc_errors(worker, TRACES, "UNAUTHENTICATED") == 2
    assert healthy(worker)


async def test_a_stranger_flooding_is_throttled_with_retry_info(worker: WorkerProcess):
    """Bad tokens from one address beyond its bucket (burst 3): RESOURCE_EXHAUSTED with the
    delay in RetryInfo, where the OTLP exporters read it; the right token still passes."""
    body = bytes(encode_spans(sdk_spans(1)).SerializeToString())
    codes = []
    for _ in range(6):
        code, _, trailing, _ = await call(worker.grpc_target, TRACES, body, token="guess")
        codes.append(code)
    assert codes[:3] == [grpc.StatusCode.UNAUTHENTICATED] * 3
    assert codes[3:] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 3
    info = error_details_pb2.RetryInfo.FromString(trailing["google.rpc.retryinfo-bin"])
    assert info.retry_delay.seconds >= 1
    status = status_pb2.Status.FromString(trailing["grpc-status-details-bin"])
    assert status.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)
    code, _, _, _ = await call(worker.grpc_target, TRACES, body)
    assert code == grpc.StatusCode.OK
    assert grpc_errors(worker, TRACES, "RESOURCE_EXHAUSTED") == 3
    assert healthy(worker)


async def test_an_unavailable_event_bus_is_unavailable_with_retry_info():
    """An in-process server over the real ``receive_traces`` whose publish fails."""

    async def publish(events: list[AgentEvent]) -> None:
        raise MonitorError("broker down")

    async def traces(authorization: str | None, peer: str | None, body: bytes) -> Any:
        async def read_chunk() -> bytes:
            nonlocal body
            chunk, body = body, b""
            return chunk

        return await receive_traces(
            authorization=authorization,
            content_type="application/x-protobuf",
            content_encoding=None,
            content_length=None,
            read_chunk=read_chunk,
            publish=publish,
            authorize=authorize,
            limits=TraceLimits(max_body_bytes=MAX_BODY, max_spans=20),
            config=MappingConfig(),
            guard=open_guard(),
            peer=peer,
        )

    server = grpc_server(traces, traces, max_message_bytes=MAX_BODY)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        body = bytes(encode_spans(sdk_spans(1)).SerializeToString())
        code, details, trailing, _ = await call(f"127.0.0.1:{port}", TRACES, body, token="tok")
    finally:
        await server.stop(0)
    assert code == grpc.StatusCode.UNAVAILABLE and "event bus unavailable" in details
    info = error_details_pb2.RetryInfo.FromString(trailing["google.rpc.retryinfo-bin"])
    assert info.retry_delay.seconds == 5
