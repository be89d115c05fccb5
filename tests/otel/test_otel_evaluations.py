"""Evaluations out: judge verdicts as ``gen_ai.evaluation.result`` events over OTLP/HTTP, sent
to a real OTLP logs receiver on loopback (aiohttp) and decoded with ``opentelemetry-proto``."""

from __future__ import annotations

from collections import deque
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

from monitor.config import Settings
from monitor.judges.assembly import evaluation_sink, otlp_headers
from monitor.judges.base import Verdict
from monitor.otel.evaluation_export import EvaluationExporter
from monitor.telemetry.ops_metrics import OpsMetrics
from tests.servers.scripted import serve_on_loopback

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


class LogsReceiver:
    """POST /v1/logs: decodes each request; answers the queued statuses, then 200."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], ExportLogsServiceRequest]] = []
        self.statuses: deque[int] = deque()
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/logs"

    async def __aenter__(self) -> LogsReceiver:
        app = web.Application()
        app.router.add_post("/v1/logs", self._handle)
        self._runner, self.port = await serve_on_loopback(app, shutdown_timeout=0.2)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        message = ExportLogsServiceRequest()
        message.ParseFromString(await request.read())
        self.requests.append((dict(request.headers), message))
        status = self.statuses.popleft() if self.statuses else 200
        body = ExportLogsServiceResponse().SerializeToString()
        return web.Response(status=status, body=body, content_type="application/x-protobuf")


def attrs(record: Any) -> dict[str, Any]:
    out = {}
    for kv in record.attributes:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which)
    return out


VERDICTS = [
    Verdict(
        "det.ignored_error",
        "1",
        "conv-1",
        f"otel:{TRACE}:{SPAN}:assistant",
        label=0,
        score=0.0,
        rationale="claims the refund went through after the tool failed",
    ),
    Verdict("llm.rubric", "3", "conv-2", None, label=1, score=0.875, rationale="fine"),
    Verdict("llm.rubric", "3", "conv-3", "e-9", status="error", error="judge timed out"),
]


async def test_verdicts_reach_an_otlp_receiver_as_evaluation_events_linked_to_spans():
    async with LogsReceiver() as receiver:
        exporter = EvaluationExporter(
            receiver.url, {"Authorization": "Bearer t"}, now_nanos=lambda: 1_700_000_000_000_000_000
        )
        try:
            assert await exporter.export(VERDICTS) is True
        finally:
            await exporter.aclose()
    [(headers, request)] = receiver.requests
    assert headers["Authorization"] == "Bearer t"
    assert headers["Content-Type"] == "application/x-protobuf"
    [rl] = request.resource_logs
    assert attrs(rl.resource) == {"service.name": "agent-reliability-monitor"}
    records = list(rl.scope_logs[0].log_records)
    assert [r.event_name for r in records] == ["gen_ai.evaluation.result"] * 3
    first, second, third = records
    assert attrs(first) == {
        "gen_ai.evaluation.name": "det.ignored_error",
        "gen_ai.conversation.id": "conv-1",
        "monitor.judge.version": "1",
        "gen_ai.evaluation.score.value": 0.0,
        "gen_ai.evaluation.score.label": "fail",
        "gen_ai.evaluation.explanation": "claims the refund went through after the tool failed",
        "monitor.item_id": f"otel:{TRACE}:{SPAN}:assistant",
    }
    assert (first.trace_id.hex(), first.span_id.hex()) == (TRACE, SPAN)  # the evaluated span
    assert first.time_unix_nano == 1_700_000_000_000_000_000
    assert attrs(second)["gen_ai.evaluation.score.value"] == 0.875
    assert attrs(second)["gen_ai.evaluation.score.label"] == "pass"
    assert second.trace_id == b"" and second.span_id == b""  # not made from a span
    assert attrs(third)["error.type"] == "judge_error"
    assert attrs(third)["gen_ai.evaluation.explanation"] == "judge timed out"


async def test_retryable_answers_are_retried_and_a_refusal_is_reported():
    async with LogsReceiver() as receiver:
        exporter = EvaluationExporter(receiver.url, pause_s=0.01)
        receiver.statuses.extend([503, 429])
        assert await exporter.export(VERDICTS[:1]) is True
        assert len(receiver.requests) == 3
        receiver.statuses.append(400)
        assert await exporter.export(VERDICTS[:1]) is False  # not retried
        assert len(receiver.requests) == 4
        await exporter.aclose()
    down = EvaluationExporter(receiver.url, retries=1, pause_s=0.01)  # nobody listens now
    assert await down.export(VERDICTS[:1]) is False
    await down.aclose()


async def test_the_judge_loop_sink_from_the_settings_counts_what_it_sent():
    assert otlp_headers("Authorization=Bearer%20x, x-tenant=a") == {
        "Authorization": "Bearer x",
        "x-tenant": "a",
    }
    metrics = OpsMetrics()
    async with LogsReceiver() as receiver:
        settings = Settings(
            otel_evaluations_endpoint=receiver.url,
            otel_evaluations_headers="Authorization=Bearer%20k",
        )
        sink = evaluation_sink(settings, metrics)
        assert await sink(list(VERDICTS)) is True
        assert receiver.requests[0][0]["Authorization"] == "Bearer k"
        receiver.statuses.extend([400])
        assert await sink(list(VERDICTS[:1])) is False
    text = metrics.render().decode()
    assert 'monitor_evaluations_exported_total{result="ok"} 3.0' in text
    assert 'monitor_evaluations_exported_total{result="failed"} 1.0' in text
