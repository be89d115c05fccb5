"""Evaluations out: judge verdicts as ``gen_ai.evaluation.result`` events over OTLP/HTTP, sent
to a real OTLP logs receiver on loopback (aiohttp) and decoded with ``opentelemetry-proto``."""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

from monitor.config import Settings
from monitor.contract.events import AgentEvent
from monitor.contract.payloads import Agent, GateFinding, GatePayload
from monitor.judges.assembly import evaluation_sink
from monitor.judges.base import Verdict
from monitor.otel.evaluation_export import EvaluationExporter, EvaluationQueue, otlp_headers
from monitor.telemetry.ops_metrics import OpsMetrics
from tests.servers.scripted import serve_on_loopback
from tests.servers.worker import running_gate_worker

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


def gate_event(decision: str, calibrated: float, **extra: Any) -> AgentEvent:
    payload = GatePayload(
        decision=decision,  # type: ignore[arg-type]
        confidence=0.82,
        calibrated=calibrated,
        map_version=3,
        threshold=0.5,
        threshold_source="policy gate.yaml rules[0]",
        policy_version="2026-11-23",
        latency_ms=0.4,
        **extra,
    )
    return AgentEvent.of(
        payload,
        event_id=f"gate:{decision}",
        ts=datetime(2026, 12, 1, 9, 30, 0, 123456, tzinfo=UTC),
        conversation_id="conv-g",
        agent=Agent(id="support-bot"),
    )


async def test_gate_decisions_are_exported_in_the_background_as_evaluations():
    findings = [GateFinding(judge="det.authorization", critique="no matching tool call")]
    events = [
        gate_event("proceed", 0.91),
        gate_event("revise", 0.42, findings=findings),
        gate_event("escalate", 0.2, degraded="fail closed: checks took 61 ms, deadline 50 ms"),
    ]
    async with LogsReceiver() as receiver:
        exporter = EvaluationExporter(receiver.url, {"Authorization": "Bearer g"}, pause_s=0.01)
        queue = EvaluationQueue(exporter, batch=2, interval_s=0.05)
        for event in events:
            queue.add(event)  # returns at once: nothing sent yet
        assert receiver.requests == []
        for _ in range(100):
            if (
                sum(len(r.resource_logs[0].scope_logs[0].log_records) for _, r in receiver.requests)
                == 3
            ):
                break
            await asyncio.sleep(0.02)
        receiver.statuses.append(400)  # the endpoint refuses the next batch: counted failed
        queue.add(gate_event("proceed", 0.7))
        await queue.aclose()
    assert queue.counts == {"ok": 3, "failed": 1, "dropped": 0}
    records = [
        r for _, req in receiver.requests for r in req.resource_logs[0].scope_logs[0].log_records
    ]
    assert [h["Authorization"] for h, _ in receiver.requests] == ["Bearer g"] * len(
        receiver.requests
    )
    scope = receiver.requests[0][1].resource_logs[0].scope_logs[0].scope.name
    assert scope == "agent-reliability-monitor.gate"
    assert [r.event_name for r in records] == ["gen_ai.evaluation.result"] * 4
    assert attrs(records[0]) == {
        "gen_ai.evaluation.name": "gate:2026-11-23",
        "gen_ai.evaluation.score.value": 0.91,
        "gen_ai.evaluation.score.label": "proceed",
        "gen_ai.conversation.id": "conv-g",
        "gen_ai.agent.id": "support-bot",
        "monitor.gate.decision_id": "gate:proceed",
        "monitor.gate.confidence": 0.82,
        "monitor.gate.threshold": 0.5,
        "monitor.gate.threshold_source": "policy gate.yaml rules[0]",
        "monitor.gate.enforced": True,
    }
    assert records[0].time_unix_nano == 1_796_117_400_123_456_000  # the decision's time
    assert attrs(records[1])["gen_ai.evaluation.explanation"] == (
        "det.authorization: no matching tool call"
    )
    third = attrs(records[2])
    assert third["gen_ai.evaluation.score.label"] == "escalate"
    assert third["gen_ai.evaluation.explanation"] == third["monitor.gate.degraded"]

    # a full queue drops (and counts) rather than grow or wait
    full = EvaluationQueue(EvaluationExporter(receiver.url, retries=0), max_queued=1)
    full.add(events[0])
    full.add(events[1])
    assert full.counts["dropped"] == 1
    await full.aclose()  # nobody listens any more: the queued one failed
    assert full.counts == {"ok": 0, "failed": 1, "dropped": 1}


async def test_a_gates_decisions_reach_the_evaluations_endpoint(
    broker: Any, topic_name: str, database_url: str, tmp_path: Path
):
    """The real gate process with MONITOR_OTEL_EVALUATIONS_ENDPOINT: every decision it answers
    reaches the loopback OTLP receiver as an evaluation, counted on its /metrics."""
    policy = 'version: "ev-1"\nrules:\n  - agent: "*"\n    threshold: 0.6\n'
    async with (
        LogsReceiver() as receiver,
        running_gate_worker(
            broker.bootstrap,
            database_url,
            topic_name,
            tmp_path,
            policy,
            MONITOR_OTEL_EVALUATIONS_ENDPOINT=receiver.url,
            MONITOR_OTEL_EVALUATIONS_HEADERS="Authorization=Bearer%20ev",
        ) as worker,
    ):
        async with httpx.AsyncClient(timeout=30) as client:
            answers = []
            for i, confidence in enumerate((0.9, 0.3)):
                ask = {
                    "conversation_id": f"c-{i}",
                    "agent": {"id": "bot"},
                    "content": "Your order has shipped.",
                    "confidence": confidence,
                    "request_id": f"r{i}",
                }
                r = await client.post(f"{worker.gate_url}/v1/gate", json=ask)
                assert r.status_code == 200, r.text
                answers.append(r.json())
        for _ in range(100):
            got = [
                r
                for _, req in receiver.requests
                for r in req.resource_logs[0].scope_logs[0].log_records
            ]
            if len(got) == 2:
                break
            await asyncio.sleep(0.1)
        text = httpx.get(f"{worker.gate_url}/metrics", timeout=10).text
    assert [a["decision"] for a in answers] == ["proceed", "escalate"]
    by_id = {attrs(r)["monitor.gate.decision_id"]: attrs(r) for r in got}
    assert set(by_id) == {a["decision_id"] for a in answers}
    for a in answers:
        sent = by_id[a["decision_id"]]
        assert sent["gen_ai.evaluation.name"] == "gate:ev-1"
        assert sent["gen_ai.evaluation.score.label"] == a["decision"]
        assert sent["gen_ai.evaluation.score.value"] == a["calibrated_confidence"]
    assert {h["Authorization"] for h, _ in receiver.requests} == {"Bearer ev"}
    assert 'monitor_gate_evaluations_exported{result="ok"} 2.0' in text
