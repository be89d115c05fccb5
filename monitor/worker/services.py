"""The worker's long-running services (mode Services, started by the faust app in app.py).

- :class:`IngestService`: the batched ingest loop and the HTTP-ingest producer;
- :class:`JudgeService`: the judge scheduler and consumer;
- :class:`LoopLagService`: the event-loop probe (the loop's longest stall, on /metrics);
- :class:`AnalyticsService`: periodic drift checks;
- :class:`RetentionService`: partitions ahead and retention (one worker at a time);
- :class:`AlertingService`: alert evaluation (one leader) and outbox delivery (every worker);

Each stops cleanly: loops are asked to finish, connections are closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from mode import Service

from monitor.alerts.destinations import NO_DESTINATION
from monitor.alerts.evaluate import EvaluationReport
from monitor.alerts.evaluate import run as run_evaluation
from monitor.alerts.notifier import notifier_from_settings
from monitor.alerts.rules import load_alert_rules
from monitor.alerts.sinks.registry import configured_sinks
from monitor.analytics.periodic import Every, drift_once
from monitor.auth.origin_key import origin_key
from monitor.config import Settings, load_sampling_policy
from monitor.core.clock import SystemClock
from monitor.ingest.loop import IngestConfig, IngestLoop
from monitor.ingest.writer import EventWriter
from monitor.judges.assembly import build_loop as build_judge_loop
from monitor.sdk import EventEmitter
from monitor.store.engine import make_engine
from monitor.store.retention import RetentionReport, run_retention
from monitor.telemetry.loop_lag import LoopLag
from monitor.telemetry.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.worker.services")


class IngestService(Service):
    """Runs ``IngestLoop`` for the worker's lifetime and owns the HTTP ingest producer.

    Stopping asks the loop to finish (a batch not yet written stays uncommitted) and flushes
    the producer, so nothing acknowledged over HTTP is lost.
    """

    def __init__(self, settings: Settings, metrics: OpsMetrics, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        assert settings.kafka_bootstrap and settings.database_url
        self.writer = EventWriter(
            settings.database_url,
            pool_size=settings.writes_in_flight,  # a connection per batch in flight
            policy=load_sampling_policy(settings),
        )
        self.loop_ = IngestLoop(
            IngestConfig(
                bootstrap=settings.kafka_bootstrap,
                topic=settings.topic_events,
                dlq_topic=settings.topic_dlq,
                group_id=settings.consumer_group,
                batch_max_events=settings.batch_max_events,
                batch_max_wait_ms=settings.batch_max_wait_ms,
                fetch_max_wait_ms=settings.fetch_max_wait_ms,
                retry_initial_s=settings.store_retry_initial_s,
                retry_max_s=settings.store_retry_max_s,
                idempotent_producer=settings.kafka_idempotent,
                max_future_skew_s=settings.max_future_skew_s,
                stall_after_s=settings.health_stall_s,
                commit_timeout_s=settings.commit_timeout_s,
                writes_in_flight=settings.writes_in_flight,
                origin_key=origin_key(settings.gate_origin_key, settings.state_dir),
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
    """Runs the judge scheduler and the judge consumer (monitor.judges.worker) in the worker."""

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


class LoopLagService(Service):
    """The event-loop probe (:mod:`monitor.telemetry.loop_lag`): how long the loop is held,
    exported on /metrics (``monitor_event_loop_stall_seconds`` and the lag histogram)."""

    def __init__(self, metrics: OpsMetrics, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lag = LoopLag(SystemClock().monotonic)
        metrics.watch_loop(self.lag)
        self.stopping = asyncio.Event()

    @Service.task
    async def _probe(self) -> None:
        await self.lag.run(self.stopping)

    async def on_stop(self) -> None:
        self.stopping.set()


class AnalyticsService(Service):
    """Periodic analytics of the worker: drift checks every ``drift_interval_s``."""

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        assert settings.database_url
        self.engine = make_engine(settings.database_url, pool_size=2)
        recent = timedelta(seconds=settings.drift_recent_s)
        reference = timedelta(seconds=settings.drift_reference_s)
        self.drift = Every(
            "drift checks",
            settings.drift_interval_s,
            lambda: drift_once(
                self.engine,
                SystemClock(),
                recent,
                settings.drift_alpha,
                settings.drift_min_samples,
                reference,
                settings.drift_min_reference,
            ),
        )

    @Service.task
    async def _drift(self) -> None:
        await self.drift.run()

    async def on_stop(self) -> None:
        self.drift.stop()
        await self.engine.dispose()


class RetentionService(Service):
    """The retention job (:mod:`monitor.store.retention`): at start, then every
    ``retention_interval_s``; one worker at a time (advisory lock), counted in /metrics."""

    def __init__(self, settings: Settings, metrics: OpsMetrics, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        assert settings.database_url
        self.settings, self.metrics = settings, metrics
        self.engine = make_engine(settings.database_url, pool_size=1)
        self.every = Every("retention", settings.retention_interval_s, self.once)

    async def once(self) -> RetentionReport:
        now = SystemClock().now()
        report = await run_retention(self.engine, self.settings, now)
        self.metrics.retention(report, now.timestamp())
        return report

    @Service.task
    async def _retain(self) -> None:
        try:
            await self.once()
        except Exception as exc:  # the store may not be up yet: the next tick retries
            log.warning("retention failed: %s", exc)
        await self.every.run()

    async def on_stop(self) -> None:
        self.every.stop()
        await self.engine.dispose()


class AlertingService(Service):
    """Alert evaluation (one leader among the workers, monitor.alerts.evaluate) and delivery
    of the notification outbox (every worker, monitor.alerts.notifier)."""

    def __init__(
        self,
        settings: Settings,
        metrics: OpsMetrics,
        stall: Callable[[], float | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        assert settings.database_url
        self.stall = stall  # the local ingest loop's stall seconds (ingest_stall_s rules)
        self.exemplars = settings.alert_exemplars
        self.rules, _ = load_alert_rules(settings)  # ConfigError at startup, naming the line
        self.engine = make_engine(settings.database_url, pool_size=4)
        self.sinks = configured_sinks(settings)
        if not self.sinks:
            log.warning("alerting: %s", NO_DESTINATION)
        self.notifier = notifier_from_settings(settings, self.engine, self.sinks)
        self.stopping = asyncio.Event()
        self.outbox_written = asyncio.Event()  # wakes the notifier right after an evaluation
        self.metrics = metrics

    def _lag(self) -> float | None:
        samples = [s.value for m in self.metrics.consumer_lag.collect() for s in m.samples]
        return max(samples) if samples else None

    @Service.task
    async def _evaluate(self) -> None:
        await run_evaluation(
            self.engine,
            self.rules,
            sorted(self.sinks),
            self.stopping,
            self.rules.evaluation_interval.total_seconds(),
            SystemClock(),
            lag=self._lag,
            stall=self.stall,
            on_report=self._on_report,
            exemplars=self.exemplars,
        )

    def _on_report(self, report: EvaluationReport) -> None:
        self.metrics.alerts(report.flapping)
        self.metrics.incidents(
            report.open_incidents, [n.severity for n in report.pages], report.incident_updates
        )
        if report.outbox_rows:
            self.outbox_written.set()

    @Service.task
    async def _notify(self) -> None:
        await self.notifier.run(self.stopping, self.outbox_written)

    async def on_stop(self) -> None:
        self.stopping.set()
        await asyncio.gather(*(s.aclose() for s in self.sinks.values()))
        await self.engine.dispose()
