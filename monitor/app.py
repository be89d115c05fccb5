"""The worker: the only module that imports faust.

``create_app(settings)`` builds (without connecting) a faust App whose worker runs
- ``IngestService``: the batched aiokafka ingest loop (monitor.flows.ingest) as a mode service,
  because faust's per-event agents peak far below the firehose rate (issue 2 measurements);
- web views: ``POST /v1/events`` (HTTP ingest), ``GET /metrics`` (Prometheus), ``GET /health``.
Lower-volume streams (judges, alerts) are to be faust agents on the same app.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, cast

import faust
from faust.web import Request, Response, View
from mode import Service
from sqlalchemy.exc import SQLAlchemyError

from monitor.clock import SystemClock
from monitor.config import Settings, load_sampling_policy
from monitor.errors import MonitorError
from monitor.flows.http_ingest import (
    BadBody,
    RequestTooLarge,
    parse_events,
    response_body,
    status_for,
    token_ok,
)
from monitor.flows.ingest import IngestConfig, IngestLoop
from monitor.flows.judging import build_loop as build_judge_loop
from monitor.flows.periodic import Every, drift_once
from monitor.ops_metrics import CONTENT_TYPE, OpsMetrics
from monitor.sdk import EventEmitter
from monitor.store.analytics_write import current_maps
from monitor.store.engine import make_engine
from monitor.store.event_writer import EventWriter

log = logging.getLogger("monitor.app")


class IngestService(Service):
    """Runs ``IngestLoop`` for the worker's lifetime and owns the HTTP ingest producer.

    Stopping asks the loop to finish (a batch not yet written stays uncommitted) and flushes
    the producer, so nothing acknowledged over HTTP is lost.
    """

    def __init__(self, settings: Settings, metrics: OpsMetrics, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        assert settings.kafka_bootstrap and settings.database_url
        self.writer = EventWriter(settings.database_url, policy=load_sampling_policy(settings))
        self.loop_ = IngestLoop(
            IngestConfig(
                bootstrap=settings.kafka_bootstrap,
                topic=settings.topic_events,
                dlq_topic=settings.topic_dlq,
                group_id=settings.consumer_group,
                batch_max_events=settings.batch_max_events,
                batch_max_wait_ms=settings.batch_max_wait_ms,
                retry_initial_s=settings.store_retry_initial_s,
                retry_max_s=settings.store_retry_max_s,
                idempotent_producer=settings.kafka_idempotent,
            ),
            self.writer,
            metrics,
        )
        self.emitter = EventEmitter(
            settings.kafka_bootstrap, settings.topic_events, idempotent=settings.kafka_idempotent
        )
        # read side of the HTTP API (connects on first use, not here)
        self.reads = make_engine(settings.database_url, pool_size=2)

    async def on_start(self) -> None:
        await self.emitter.start()

    @Service.task
    async def _run_ingest(self) -> None:
        await self.loop_.run()

    async def on_stop(self) -> None:
        await self.loop_.stop()
        await self.emitter.close()
        await self.writer.close()
        await self.reads.dispose()


class JudgeService(Service):
    """Runs the judge scheduler and the judge consumer (monitor.flows.judging) in the worker."""

    def __init__(self, settings: Settings, metrics: OpsMetrics, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        policy = load_sampling_policy(settings)
        self.judging = build_judge_loop(settings, metrics, policy.always_sample)

    async def on_start(self) -> None:
        await self.judging.start()

    @Service.task
    async def _schedule(self) -> None:
        await self.judging.schedule_forever()

    @Service.task
    async def _consume(self) -> None:
        await self.judging.consume_forever()

    async def on_stop(self) -> None:
        await self.judging.stop()
        await self.judging.close()


class AnalyticsService(Service):
    """Periodic analytics of the worker: drift checks every ``drift_interval_s``."""

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        assert settings.database_url
        self.engine = make_engine(settings.database_url, pool_size=2)
        recent = timedelta(seconds=settings.drift_recent_s)
        self.drift = Every(
            "drift checks",
            settings.drift_interval_s,
            lambda: drift_once(
                self.engine, SystemClock(), recent, settings.drift_alpha, settings.drift_min_samples
            ),
        )

    @Service.task
    async def _drift(self) -> None:
        await self.drift.run()

    async def on_stop(self) -> None:
        self.drift.stop()
        await self.engine.dispose()


def create_app(settings: Settings) -> faust.App:
    """The faust App for ``settings`` (broker and database must be configured)."""
    if not settings.kafka_bootstrap or not settings.database_url:
        raise MonitorError("the worker needs MONITOR_KAFKA_BOOTSTRAP and DATABASE_URL")
    metrics = OpsMetrics()
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
    app.service(cast(Any, ingest))  # an instance is accepted at runtime; starts with the worker
    app.service(cast(Any, AnalyticsService(settings, loop=app.loop, beacon=app.beacon)))
    if settings.judge_enabled:
        app.service(cast(Any, JudgeService(settings, metrics, loop=app.loop, beacon=app.beacon)))

    @app.page("/health")
    class Health(View):
        async def get(self, request: Request) -> Response:
            ready = ingest.loop_.ready.is_set()
            return self.json(
                {"status": "ok" if ready else "starting"}, status=200 if ready else 503
            )

    @app.page("/metrics")
    class Metrics(View):
        async def get(self, request: Request) -> Response:
            return self.bytes(metrics.render(), content_type=CONTENT_TYPE.split(";")[0])

    @app.page("/v1/events")
    class Events(View):
        async def post(self, request: Request) -> Response:
            if not token_ok(request.headers.get("Authorization"), settings.ingest_token):
                return self.json({"error": "missing or wrong bearer token"}, status=401)
            declared = request.headers.get("Content-Length") or "0"
            if declared.isdigit() and int(declared) > settings.http_max_body_bytes:
                return self.json({"error": "body too large"}, status=413)
            body = await request.read()
            try:
                verdicts = parse_events(
                    body,
                    max_body_bytes=settings.http_max_body_bytes,
                    max_events=settings.http_max_events,
                )
            except RequestTooLarge as exc:
                return self.json({"error": str(exc)}, status=413)
            except BadBody as exc:
                return self.json({"error": str(exc)}, status=400)
            if verdicts.accepted:
                try:
                    for event in verdicts.accepted:
                        await emitter.send(event)
                    await emitter.flush()
                except MonitorError as exc:
                    log.error("HTTP ingest could not publish: %s", exc)
                    return self.json({"error": f"event bus unavailable: {exc}"}, status=503)
            metrics.http_events.labels("accepted").inc(len(verdicts.accepted))
            metrics.http_events.labels("rejected").inc(verdicts.rejected)
            return self.json(response_body(verdicts), status=status_for(verdicts))

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


def run_worker(settings: Settings, loglevel: str = "info") -> None:
    """Run the worker in the foreground until SIGINT/SIGTERM (blocking)."""
    app = create_app(settings)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()
