"""The worker's sweep of the trace assembly: map what waited past the deadline or the bound.

``sweep_once`` maps every due trace under the fallback (``TraceAssembler.sweep``), publishes the
events, settles the traces, counts them (events outside the scope of a key that sent the trace's
spans are rejected, counted and logged, never published), and forgets mapped traces older than
the memory window and GenAI log records older than the deadline (their span never came:
counted ``expired``). ``TraceSweepService`` runs it every ``otel_sweep_seconds`` for the
worker's lifetime and keeps ``monitor_otlp_pending_spans`` and
``monitor_otlp_pending_log_records`` current; a failing store or event bus is
logged and retried on the next round (nothing is settled that was not published).
"""

from __future__ import annotations

import logging
from typing import Any

from mode import Service

from monitor.config import Settings
from monitor.contract.events import Publish
from monitor.core.errors import MonitorError
from monitor.otel.traces import TraceAssembler
from monitor.telemetry.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.otel.sweeper")
MAX_ROUNDS = 100  # due batches per sweep (each at most 1000 traces)


async def sweep_once(
    assembler: TraceAssembler,
    publish: Publish,
    metrics: OpsMetrics | None = None,
) -> dict[str, int]:
    """Map, publish and settle every due trace; the traces settled by how."""
    total: dict[str, int] = {}
    for _ in range(MAX_ROUNDS):
        prepared = await assembler.sweep()
        if not prepared.settle:
            break
        if prepared.mapped.events:
            await publish(prepared.mapped.events)
        await assembler.settle(prepared)
        for how, n in prepared.resolutions().items():
            total[how] = total.get(how, 0) + n
        if metrics is not None:
            metrics.otlp(prepared.mapped.failures, prepared.resolutions())
            metrics.otlp_spans.labels("mapped").inc(prepared.mapped.mapped)
            metrics.otlp_spans.labels("events").inc(len(prepared.mapped.events))
            metrics.otlp_spans.labels("rejected").inc(prepared.mapped.rejected)
        if prepared.mapped.errors:
            log.warning("trace assembly: rejected: %s", "; ".join(prepared.mapped.errors))
    expired = await assembler.forget()
    if metrics is not None:
        metrics.otlp_pending_spans.set(await assembler.waiting())
        metrics.otlp_pending_records.set(await assembler.waiting_records())
        if expired:
            metrics.otlp_log_records.labels("expired").inc(expired)
    return total


class TraceSweepService(Service):
    """``sweep_once`` every ``settings.otel_sweep_seconds`` (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        metrics: OpsMetrics,
        assembler: TraceAssembler,
        publish: Publish,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.metrics = metrics
        self.assembler = assembler
        self.publish = publish

    @Service.task
    async def _sweep(self) -> None:
        while not self.should_stop:
            try:
                done = await sweep_once(self.assembler, self.publish, self.metrics)
                if done:
                    log.info("trace assembly: mapped under the fallback: %s", done)
            except MonitorError as exc:
                log.warning("trace assembly sweep failed, retrying: %s", exc)
            await self.sleep(self.settings.otel_sweep_seconds)
