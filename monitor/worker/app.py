"""The worker: the only module that imports faust.

``create_app(settings)`` builds (without connecting) a faust App whose worker runs the services
of :mod:`monitor.worker.services` (ingest; judges unless ``judge_enabled`` is off; periodic drift
checks; retention with the events partitions created ahead; alert evaluation and delivery
unless ``alerting_enabled`` is off) and serves
``POST /v1/events`` (HTTP ingest), ``POST /v1/gate`` (the runtime trust gate, docs/gate.md:
answered from memory, its decision events published like ingested events),
``GET /v1/calibration/{agent_id}`` (recalibration maps),
``GET /metrics`` (Prometheus) and ``GET /health``. The streams are batched aiokafka consumers
run as mode services rather than per-event faust agents: faust's agents peak far below the
firehose rate (issue 2 measurements), and the judge stream needs bounded concurrency with
commit-after-write, which the same consumer pattern gives.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from datetime import timedelta
from typing import Any, cast

import faust
from faust.web import Request, Response, View
from pydantic_core import to_json
from sqlalchemy.exc import SQLAlchemyError

from monitor.analytics.write import current_maps
from monitor.config import Settings
from monitor.core.clock import SystemClock
from monitor.core.errors import MonitorError
from monitor.core.gc_tuning import tune_gc
from monitor.gate.endpoint import GateLimits, finish_gate, handle_gate
from monitor.gate.request import HistoryCache
from monitor.gate.state import MAP_CHECK_S, GateState
from monitor.ingest.http import (
    BadBody,
    RequestTooLarge,
    parse_events,
    response_body,
    status_for,
    token_ok,
)
from monitor.otel import mapping_config, trace_limits
from monitor.otel.decode import BodyTooLarge
from monitor.otel.pending import trace_assembler
from monitor.otel.receiver import receive_traces
from monitor.otel.sweeper import TraceSweepService
from monitor.otel.topic import TraceTopicService
from monitor.worker.ops_metrics import CONTENT_TYPE, OpsMetrics
from monitor.worker.services import (
    AlertingService,
    AnalyticsService,
    GateOutboxService,
    IngestService,
    JudgeService,
    RetentionService,
)

log = logging.getLogger("monitor.worker.app")


def create_app(settings: Settings) -> faust.App:
    """The faust App for ``settings`` (broker and database must be configured)."""
    if not settings.kafka_bootstrap or not settings.database_url:
        raise MonitorError("the worker needs MONITOR_KAFKA_BOOTSTRAP and DATABASE_URL")
    metrics = OpsMetrics()
    clock = SystemClock()
    datadir = settings.state_dir / "faust"
    datadir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{h}" for h in settings.kafka_bootstrap.split(",")],
        web_host=settings.web_host,
        web_bind=settings.web_host,
        web_port=settings.web_port,
        web_enabled=True,
        store="memory://",
        datadir=str(datadir),
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=1,
        producer_acks=-1,
        broker_session_timeout=10,
        broker_heartbeat_interval=1,
    )
    ingest = IngestService(settings, metrics, loop=app.loop, beacon=app.beacon)
    emitter = ingest.emitter
    gate = GateState.from_settings(settings)
    gate_outbox = GateOutboxService(settings, closing=[gate.aclose], loop=app.loop,
                                    beacon=app.beacon)  # fmt: skip
    outbox = gate_outbox.outbox  # decision events: disk buffer when the broker does not ack
    app.service(cast(Any, gate_outbox))
    otel_config, otel_limits = mapping_config(settings), trace_limits(settings)
    assembler = trace_assembler(settings)  # whole traces across requests (docs/otel.md)
    app.service(cast(Any, ingest))  # an instance is accepted at runtime; starts with the worker

    async def publish_events(events: list[Any]) -> None:
        for event in events:
            await emitter.send(event)
        await emitter.flush()

    sweeper = TraceSweepService(
        settings, metrics, assembler, publish_events, loop=app.loop, beacon=app.beacon
    )
    app.service(cast(Any, sweeper))
    if settings.topic_traces:
        traces = TraceTopicService(
            settings, metrics, emitter, assembler, loop=app.loop, beacon=app.beacon
        )
        app.service(cast(Any, traces))
    app.service(cast(Any, AnalyticsService(settings, loop=app.loop, beacon=app.beacon)))
    retention = RetentionService(settings, metrics, loop=app.loop, beacon=app.beacon)
    app.service(cast(Any, retention))
    if settings.alerting_enabled:
        alerting = AlertingService(
            settings, metrics, ingest.loop_.health.stalled_seconds, loop=app.loop, beacon=app.beacon
        )
        app.service(cast(Any, alerting))
    if settings.judge_enabled:
        app.service(cast(Any, JudgeService(settings, metrics, loop=app.loop, beacon=app.beacon)))

    @app.page("/health")
    class Health(View):
        async def get(self, request: Request) -> Response:
            healthy, state, reason = ingest.loop_.health.status()
            body = {"status": state, **({"reason": reason} if reason else {}),
                    "gate_decision_events": outbox.status()}  # fmt: skip
            return self.json(body, status=200 if healthy else 503)

    @app.page("/metrics")
    class Metrics(View):
        async def get(self, request: Request) -> Response:
            metrics.set_gate_outbox(outbox.status())
            return self.bytes(metrics.render(), content_type=CONTENT_TYPE.split(";")[0])

    @app.page("/v1/events")
    class Events(View):
        async def post(self, request: Request) -> Response:
            if not token_ok(request.headers.get("Authorization"), settings.ingest_token):
                return self.json({"error": "missing or wrong bearer token"}, status=401)
            limit = settings.http_max_body_bytes
            declared = request.headers.get("Content-Length") or "0"
            if declared.isdigit() and int(declared) > limit:
                return self.json({"error": f"body above {limit} bytes"}, status=413)
            body = await read_limited(request, limit)
            if body is None:
                return self.json({"error": f"body above {limit} bytes"}, status=413)
            try:
                verdicts = parse_events(
                    body,
                    max_body_bytes=limit,
                    max_events=settings.http_max_events,
                    now=clock.now(),
                    max_future_skew=timedelta(seconds=settings.max_future_skew_s),
                )
            except RequestTooLarge as exc:
                return self.json({"error": str(exc)}, status=413)
            except BadBody as exc:
                return self.json({"error": str(exc)}, status=400)
            except Exception as exc:  # never a 500 for a body: nothing was produced yet
                log.exception("HTTP ingest could not parse a body")
                return self.json({"error": f"unreadable body ({type(exc).__name__})"}, status=400)
            if verdicts.accepted:
                try:
                    for event in verdicts.accepted:
                        await emitter.send(event)
                    await emitter.flush()
                except Exception as exc:
                    log.error("HTTP ingest could not publish: %s", exc)
                    return self.json(
                        {"error": f"event bus unavailable ({type(exc).__name__}): re-send the "
                         "request, stored events are deduplicated by event_id"},
                        status=503,
                    )  # fmt: skip
            metrics.http_events.labels("accepted").inc(len(verdicts.accepted))
            metrics.http_events.labels("rejected").inc(verdicts.rejected)
            return self.json(response_body(verdicts), status=status_for(verdicts))

    gate_limits = GateLimits(
        settings.gate_token, settings.gate_max_body_bytes, settings.gate_max_content_chars
    )
    history_cache = HistoryCache()  # validated history events of recent conversations
    pending: set[asyncio.Task[None]] = set()  # decision events being handed to the producer

    async def refresh_gate_maps() -> None:  # at start, then every gate_refresh_s
        await gate.refresh(ingest.reads, clock.now())

    cast(Any, app).task(refresh_gate_maps)
    cast(Any, app).timer(settings.gate_refresh_s)(refresh_gate_maps)

    async def check_gate_maps() -> None:  # a newly fitted map: refreshed at once (state.py)
        await gate.check_new_map(ingest.reads, clock.now(), time.perf_counter())

    cast(Any, app).timer(MAP_CHECK_S)(check_gate_maps)

    async def publish_decision(event: Any) -> None:  # awaits the ack or the disk buffer
        if not await outbox.publish(event):
            metrics.gate_answers.labels("kept").inc()

    def gate_status() -> dict[str, Any]:  # the maps' freshness; decision events held back
        status = gate.status()
        buffered, dropped = outbox.buffer.pending, sum(outbox.buffer.dropped.values())
        if buffered or dropped or outbox.buffered_mode:
            status["decision_events_kept"] = buffered
            status["decision_events_dropped"] = dropped
        return status

    @app.page("/v1/gate")
    class Gate(View):
        async def post(self, request: Request) -> Response:
            started = time.perf_counter()
            gate.asked(started)
            limit = settings.gate_max_body_bytes
            declared = request.headers.get("Content-Length") or "0"
            too_big = declared.isdigit() and int(declared) > limit
            body = None if too_big else await read_limited(request, limit)
            reply = handle_gate(
                body,  # None: above the limit (413 once authorized)
                authorization=request.headers.get("Authorization"),
                peer=getattr(request, "remote", None), limits=gate_limits, policy=gate.policy,
                maps=gate.maps, checks=gate.checks, now=clock.now(), timer=time.perf_counter,
                started=started, new_id=lambda: uuid.uuid4().hex, status=gate_status(),
                history_cache=history_cache, cuts=gate.cuts,
            )  # fmt: skip
            if reply.pending is not None:  # a rule with the inline LLM check: awaited
                reply = await finish_gate(reply, gate.llm_judge, time.perf_counter)
            metrics.gate_answers.labels(str(reply.body.get("decision") or reply.body.get(
                "reason"))).inc()  # fmt: skip
            if reply.event is not None:  # queued without waiting for the broker
                task = asyncio.ensure_future(publish_decision(reply.event))
                pending.add(task)
                task.add_done_callback(pending.discard)
            return self.bytes(to_json(reply.body), content_type="application/json",
                              status=reply.status)  # fmt: skip

    @app.page("/v1/traces")
    class Traces(View):  # OTLP/HTTP traces; the logic is monitor.otel.receiver (docs/otel.md)
        async def post(self, request: Request) -> Response:
            async def read() -> bytes:  # the documented limit, not aiohttp's 1 MiB default
                body = await read_limited(request, settings.http_max_body_bytes)
                if body is None:
                    raise BodyTooLarge(f"body over {settings.http_max_body_bytes} bytes")
                return body

            h = request.headers
            answer = await receive_traces(
                authorization=h.get("Authorization"), content_type=h.get("Content-Type"),
                content_encoding=h.get("Content-Encoding"), content_length=h.get("Content-Length"),
                read=read, publish=publish_events, limits=otel_limits, config=otel_config,
                assembler=assembler,
            )
            for result, n in answer.counts.items():
                metrics.otlp_spans.labels(result).inc(n)
            metrics.otlp(answer.failures, answer.traces)
            return self.bytes(answer.body, content_type=answer.content_type,
                              status=answer.status, headers=answer.headers)

    @app.page("/v1/calibration/{agent_id}")
    class Calibration(View):
        async def get(self, request: Request, agent_id: str) -> Response:
            if settings.api_token and not token_ok(
                request.headers.get("Authorization"), settings.api_token
            ):
                return self.json({"error": "missing or wrong bearer token"}, status=401)
            try:
                maps = await current_maps(ingest.reads, agent_id)
            except (OSError, SQLAlchemyError) as exc:
                log.error("calibration maps unavailable: %s", exc)
                return self.json({"error": "store unavailable"}, status=503)
            if not maps:
                return self.json(
                    {"error": f"no recalibration map for agent {agent_id!r}", "agent_id": agent_id},
                    status=404,
                )
            return self.json({"agent_id": agent_id, "maps": [m.to_dict() for m in maps]})

    return app


async def read_limited(request: Request, limit: int) -> bytes | None:
    """The request body, or None as soon as it exceeds ``limit`` bytes (read in chunks, so the
    documented limit applies instead of aiohttp's 1 MiB ``client_max_size``)."""
    stream = cast(Any, request).content
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def run_worker(settings: Settings, loglevel: str = "info") -> None:
    """Run the worker in the foreground until SIGINT/SIGTERM (blocking)."""
    app = create_app(settings)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    tune_gc()  # fewer, shorter collector pauses (monitor/core/gc_tuning.py)
    if not sys.stdout.isatty():  # a log file: faust's spinner would write cursor escape codes
        worker.spinner = None
    worker.execute_from_commandline()
