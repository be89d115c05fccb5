"""The worker: the only module that imports faust.

``create_app(settings)`` builds (without connecting) a faust App whose worker runs the services
of :mod:`monitor.worker.services` (ingest; judges unless ``judge_enabled`` is off; periodic drift
checks; retention with the events partitions created ahead; alert evaluation and delivery
unless ``alerting_enabled`` is off) and serves
``POST /v1/events`` (HTTP ingest), ``POST /v1/traces`` (OTLP),
``GET /v1/calibration/{agent_id}`` (recalibration maps),
``GET /metrics`` (Prometheus) and ``GET /health``. ``/v1/gate`` is not served here: it answers
404 with a pointer to the gate process (``monitor gate serve``, docs/gate.md), whose answers do
not queue behind this process's ingest. The streams are batched aiokafka consumers run as
mode services rather than per-event faust agents: faust's agents peak far below the firehose rate
(measured at about 3,800 events/s), and the judge stream needs bounded concurrency with
commit-after-write, which the same consumer pattern gives.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar, cast

import faust
from faust.web import Request, Response, View
from sqlalchemy.exc import SQLAlchemyError

from monitor.analytics.calibration_endpoint import answer_calibration
from monitor.analytics.write import current_maps
from monitor.auth import repo as key_repo
from monitor.auth.admission import Authorize
from monitor.auth.cache import KeyCache
from monitor.auth.keys import Scope
from monitor.config import Settings
from monitor.core.clock import SystemClock
from monitor.core.errors import MonitorError, StoreUnavailable
from monitor.core.gc_tuning import collect_periodically, tune_gc
from monitor.core.http_body import BodyLimits, ReadChunk
from monitor.core.http_guard import Guard
from monitor.core.http_reply import Reply, error_reply
from monitor.core.rate_limit import Rate, RateLimiter
from monitor.gate import http_server
from monitor.gate.answering import GATE
from monitor.ingest.endpoint import IngestLimits, receive_events
from monitor.otel import mapping_config, trace_limits
from monitor.otel.grpc_receiver import OtlpGrpcService, otlp_receivers
from monitor.otel.log_receiver import receive_logs
from monitor.otel.pending import trace_assembler
from monitor.otel.receiver import receive_traces
from monitor.otel.sweeper import TraceSweepService
from monitor.otel.topic import TraceTopicService
from monitor.otel.traces import TraceAssembler
from monitor.telemetry.ops_metrics import CONTENT_TYPE, OpsMetrics
from monitor.worker.services import (
    AlertingService,
    AnalyticsService,
    IngestService,
    JudgeService,
    LoopLagService,
    RetentionService,
)

log = logging.getLogger("monitor.worker.app")
T = TypeVar("T")
PUBLISH_YIELD_EVERY = 500  # events handed to the producer between two yields to the loop


def create_app(settings: Settings) -> faust.App:
    """The faust App for ``settings`` (broker and database must be configured): its services
    (:mod:`monitor.worker.services`) and its HTTP endpoints, whose logic lives in their packages.
    Builds only: nothing connects before the worker starts."""
    if not settings.kafka_bootstrap or not settings.database_url:
        raise MonitorError("the worker needs MONITOR_KAFKA_BOOTSTRAP and DATABASE_URL")
    metrics, clock = OpsMetrics(), SystemClock()
    app = _faust_app(settings, metrics)
    wired = _add_services(app, settings, metrics, clock)
    access = _add_key_cache(app, settings, wired.ingest, clock)
    _add_routes(app, settings, metrics, clock, wired, access)
    _add_collector(app, settings)
    return app


def _add_collector(app: faust.App, settings: Settings) -> None:
    """A full garbage collection every ``gc_interval_s`` while the worker runs (the cyclic
    garbage of the database clients: monitor/core/gc_tuning.py)."""

    async def collect() -> None:
        await collect_periodically(settings.gc_interval_s)

    cast(Any, app).task(collect)


def _faust_app(settings: Settings, metrics: OpsMetrics) -> faust.App:
    assert settings.kafka_bootstrap  # checked by create_app
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
        web_application_options=http_server.application_options(settings),
    )
    # No faust agents, tables or topics: its consumer would only join a group of its own
    # (seconds of a broker's initial rebalance delay before the web server and the services
    # start); the streams are the services' own consumers.
    app.producer_only = True
    # the web server's runner answers aiohttp's own parser errors as JSON, counted, never
    # quoting the request (http_server.py)
    refusals = http_server.Refusals(metrics)
    cast(Any, app).on_webserver_init = lambda web: http_server.install(web, refusals)
    return app


@dataclass(frozen=True)
class _Wired:
    """What the HTTP endpoints use of the services."""

    ingest: IngestService  # its health, its read engine
    assembler: TraceAssembler  # whole traces across requests (docs/otel.md)
    publish: Callable[[list[Any]], Awaitable[None]]  # events onto the events topic


def _add_services(
    app: faust.App, settings: Settings, metrics: OpsMetrics, clock: SystemClock
) -> _Wired:
    """Registers the worker's services (each starts and stops with the worker)."""

    def add(service: Any) -> None:  # an instance is accepted at runtime
        app.service(service)

    on = {"loop": app.loop, "beacon": app.beacon}
    ingest = IngestService(settings, metrics, **on)
    emitter = ingest.emitter
    add(LoopLagService(metrics, **on))
    assembler = trace_assembler(settings)
    add(ingest)
    if settings.topic_traces:
        add(TraceTopicService(settings, metrics, emitter, assembler, **on))
    add(AnalyticsService(settings, **on))
    add(RetentionService(settings, metrics, **on))
    if settings.alerting_enabled:
        add(AlertingService(settings, metrics, ingest.loop_.health.stalled_seconds, **on))
    if settings.judge_enabled:
        add(JudgeService(settings, metrics, **on))

    async def publish(events: list[Any]) -> None:  # /v1/events, /v1/traces and the sweeper
        for i, event in enumerate(events, 1):
            await emitter.send(event)
            if i % PUBLISH_YIELD_EVERY == 0:
                await asyncio.sleep(0)  # a large batch does not hold the loop
        await emitter.flush()

    add(TraceSweepService(settings, metrics, assembler, publish, **on))  # roots that never came
    return _Wired(ingest, assembler, publish)


@dataclass(frozen=True)
class _Access:
    """The key cache's answer for each action (monitor.auth.cache)."""

    write: Authorize
    read: Authorize


def _add_key_cache(
    app: faust.App, settings: Settings, ingest: IngestService, clock: SystemClock
) -> _Access:
    """The API keys (the settings' tokens, then the stored keys), refreshed at start and every
    ``keys_refresh_s``."""

    async def load_keys() -> Any:
        async with ingest.reads.connect() as conn:
            return await key_repo.load_keys(conn)

    tokens: dict[Scope, str | None] = {"write": settings.ingest_token, "read": settings.api_token}
    keys = KeyCache(
        load_keys, tokens, clock.now, time.monotonic, miss_interval_s=settings.keys_miss_refresh_s
    )

    async def refresh_keys() -> None:
        await keys.refresh()

    cast(Any, app).task(refresh_keys)
    cast(Any, app).timer(settings.keys_refresh_s)(refresh_keys)

    def authorizer(action: Scope) -> Authorize:
        return lambda authorization: keys.check(authorization, action)

    return _Access(authorizer("write"), authorizer("read"))


def _add_routes(
    app: faust.App,
    settings: Settings,
    metrics: OpsMetrics,
    clock: SystemClock,
    wired: _Wired,
    access: _Access,
) -> None:
    """The HTTP endpoints: each view reads the request and hands it to its package's logic."""
    guards = make_guards(settings, time.monotonic)
    parse_pool = ThreadPoolExecutor(settings.http_parse_threads, thread_name_prefix="http-parse")
    body_slots = asyncio.Semaphore(settings.http_max_bodies_in_flight)  # events and traces

    def offload(fn: Callable[[], T]) -> Awaitable[T]:  # large bodies parsed off the loop
        return asyncio.get_running_loop().run_in_executor(parse_pool, fn)

    body_limits = BodyLimits(
        settings.http_max_body_bytes, settings.http_max_inflate_ratio, settings.http_read_timeout_s
    )
    ingest_limits = IngestLimits(
        body_limits,
        settings.http_max_events,
        timedelta(seconds=settings.max_future_skew_s),
        settings.http_inline_parse_bytes,
    )
    otel_config, otel_limits = mapping_config(settings), trace_limits(settings)
    health, publish = wired.ingest.loop_.health, wired.publish

    @app.page("/health")
    class Health(View):
        async def get(self, request: Request) -> Response:
            healthy, state, reason = health.status()
            body = {"status": state, **({"reason": reason} if reason else {})}
            return self.json(body, status=200 if healthy else 503)

    @app.page("/metrics")
    class Metrics(View):
        async def get(self, request: Request) -> Response:
            return self.bytes(metrics.render(), content_type=CONTENT_TYPE.split(";")[0])

    @app.page("/v1/events")
    class Events(View):  # the logic is monitor.ingest.endpoint
        async def post(self, request: Request) -> Response:
            reply = await receive_events(
                headers=request.headers,
                peer=peer_of(request),
                read_chunk=chunks(request),
                publish=publish,
                authorize=access.write,
                limits=ingest_limits,
                guard=guards.ingest,
                now=clock.now,
                offload=offload,
                slots=body_slots,
            )
            metrics.http_events.labels("accepted").inc(reply.counts.get("accepted", 0))
            metrics.http_events.labels("rejected").inc(reply.counts.get("rejected", 0))
            return respond(self, reply, metrics, "/v1/events")

    @app.page(GATE)
    class GateElsewhere(View):  # the gate is a process of its own (docs/gate.md)
        async def post(self, request: Request) -> Response:
            return respond(self, GATE_ELSEWHERE, metrics, GATE)

        async def get(self, request: Request) -> Response:
            return respond(self, GATE_ELSEWHERE, metrics, GATE)

    @app.page("/v1/traces")
    class Traces(View):  # OTLP/HTTP traces; the logic is monitor.otel.receiver (docs/otel.md)
        async def post(self, request: Request) -> Response:
            h = request.headers
            answer = await receive_traces(
                authorization=h.get("Authorization"),
                content_type=h.get("Content-Type"),
                content_encoding=h.get("Content-Encoding"),
                content_length=h.get("Content-Length"),
                read_chunk=chunks(request),
                publish=publish,
                authorize=access.write,
                limits=otel_limits,
                config=otel_config,
                guard=guards.ingest,
                peer=peer_of(request),
                offload=offload,
                slots=body_slots,
                assembler=wired.assembler,
            )
            for result, n in answer.counts.items():
                metrics.otlp_spans.labels(result).inc(n)
            metrics.otlp(answer.failures, answer.traces)
            return respond(self, answer, metrics, "/v1/traces")

    @app.page("/v1/logs")
    class Logs(View):  # OTLP/HTTP logs; the logic is monitor.otel.log_receiver (docs/otel.md)
        async def post(self, request: Request) -> Response:
            h = request.headers
            answer = await receive_logs(
                authorization=h.get("Authorization"),
                content_type=h.get("Content-Type"),
                content_encoding=h.get("Content-Encoding"),
                content_length=h.get("Content-Length"),
                read_chunk=chunks(request),
                publish=publish,
                authorize=access.write,
                limits=otel_limits,
                guard=guards.ingest,
                assembler=wired.assembler,
                peer=peer_of(request),
                offload=offload,
                slots=body_slots,
            )
            for result, n in answer.counts.items():
                metrics.otlp_spans.labels(result).inc(n)
            metrics.otlp(answer.failures, answer.traces, answer.records)
            return respond(self, answer, metrics, "/v1/logs")

    if settings.otlp_grpc_port:  # the same two endpoints over OTLP/gRPC (docs/otel.md)
        receivers = otlp_receivers(
            publish=publish,
            authorize=access.write,
            limits=otel_limits,
            config=otel_config,
            guard=guards.ingest,
            assembler=wired.assembler,
            offload=offload,
            slots=body_slots,
        )
        grpc_service = OtlpGrpcService(
            settings, receivers, metrics, loop=app.loop, beacon=app.beacon
        )
        app.service(cast(Any, grpc_service))

    reads = wired.ingest.reads

    async def load_maps(agent_id: str) -> list[Any]:
        try:
            return list(await current_maps(reads, agent_id))
        except (OSError, SQLAlchemyError) as exc:
            log.error("calibration maps unavailable: %s", exc)
            raise StoreUnavailable(type(exc).__name__) from exc

    @app.page("/v1/calibration/{agent_id}")
    class Calibration(View):  # the logic is monitor.analytics.calibration_endpoint
        async def get(self, request: Request, agent_id: str) -> Response:
            reply = await answer_calibration(
                agent_id,
                headers=request.headers,
                peer=peer_of(request),
                authorize=access.read,
                guard=guards.read,
                load_maps=load_maps,
            )
            return respond(self, reply, metrics, "/v1/calibration")


#: What the worker answers on ``/v1/gate``: the gate is the gate process's.
GATE_ELSEWHERE = error_reply(
    404,
    "the worker does not answer /v1/gate: ask the gate process, `monitor gate serve` (port "
    "6067 by default; `monitor up` writes its URL as gate_url in endpoints.json; docs/gate.md)",
    "gate_elsewhere",
)


def chunks(request: Request) -> ReadChunk:
    """The request body's next raw bytes (``b""`` at the end), as they arrive."""
    return cast(Any, request).content.readany  # type: ignore[no-any-return]


def peer_of(request: Request) -> str | None:
    return cast(str | None, getattr(request, "remote", None))


def respond(view: View, reply: Reply, metrics: OpsMetrics, path: str) -> Response:
    """The framework's response for a neutral reply; 4xx counted per path and status."""
    count_client_error(metrics, path, reply.status)
    return view_bytes(view, reply)


def view_bytes(view: View, reply: Reply) -> Response:
    """The framework's response for a neutral reply, counted by its caller."""
    return view.bytes(
        reply.body, content_type=reply.content_type, status=reply.status, headers=reply.headers
    )


def count_client_error(metrics: OpsMetrics, path: str, status: int) -> None:
    if 400 <= status < 500:
        metrics.http_client_errors.labels(path, str(status)).inc()


def make_guards(settings: Settings, clock: Callable[[], float]) -> Guards:
    """The rate guards of the endpoint classes, sharing the per-peer bucket of strangers."""
    keys = settings.http_rate_max_keys
    strangers = RateLimiter(
        Rate(settings.http_unauth_rate_per_s, settings.http_unauth_rate_burst), clock, keys
    )

    def guard(per_s: float, burst: float) -> Guard:
        return Guard(RateLimiter(Rate(per_s, burst), clock, keys), strangers)

    return Guards(
        ingest=guard(settings.http_ingest_rate_per_s, settings.http_ingest_rate_burst),
        read=guard(settings.http_read_rate_per_s, settings.http_read_rate_burst),
    )


@dataclass(frozen=True)
class Guards:
    ingest: Guard  # POST /v1/events and /v1/traces
    read: Guard  # GET /v1/calibration


def run_worker(settings: Settings, loglevel: str = "info") -> None:
    """Run the worker in the foreground until SIGINT/SIGTERM (blocking)."""
    app = create_app(settings)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    tune_gc()  # fewer, shorter collector pauses (monitor/core/gc_tuning.py)
    if not sys.stdout.isatty():  # a log file: faust's spinner would write cursor escape codes
        worker.spinner = None
    worker.execute_from_commandline()
