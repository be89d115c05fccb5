"""Retrying an operation of the ingest loop with its partitions paused (backpressure).

A mixin of :class:`monitor.ingest.loop.IngestLoop` (see its module contract): ``_retry`` runs
a store write or a DLQ publish until it succeeds, pausing the batch's partitions while it fails
transiently so that nothing more is fetched, and gives up with ``_Stopping`` when the loop is
asked to stop (the caller then leaves the batch uncommitted). Two batches in flight may retry
at once: a partition stays paused until no retry that paused it is still failing.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter as Tally
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import Counter

from monitor.ingest.health import IngestHealth
from monitor.store.store_errors import describe
from monitor.telemetry.ops_metrics import OpsMetrics

if TYPE_CHECKING:
    from monitor.ingest.config import IngestConfig

log = logging.getLogger("monitor.ingest")
T = TypeVar("T")


class _Stopping(Exception):
    """``stop()`` was called while an operation was being retried."""


class PausedRetry:
    """``_retry`` over the loop's consumer, config, health and stop event."""

    config: IngestConfig
    metrics: OpsMetrics
    health: IngestHealth
    _consumer: AIOKafkaConsumer | None
    _stopping: asyncio.Event
    _paused_by: Tally[TopicPartition]  # partition -> retries that paused it and still fail

    def _pause(self, partitions: list[TopicPartition]) -> None:
        self._paused_by.update(partitions)
        if self._consumer is not None:
            self._consumer.pause(*partitions)
        self.metrics.paused.set(1)
        self.health.paused = True

    def _resume(self, partitions: list[TopicPartition]) -> None:
        self._paused_by.subtract(partitions)
        free = [tp for tp in partitions if self._paused_by[tp] <= 0]
        for tp in free:
            del self._paused_by[tp]
        if self._consumer is not None and free:
            self._consumer.resume(*free)
        if not self._paused_by:
            self.metrics.paused.set(0)
            self.health.paused = False
            self.health.last_error = ""

    async def _retry(
        self,
        op: Callable[[], Awaitable[T]],
        what: str,
        transient: Callable[[BaseException], bool],
        failures: Counter,
        partitions: list[TopicPartition],
    ) -> T:
        """Run ``op`` until it succeeds, pausing ``partitions`` while it fails transiently.

        An error ``transient`` does not accept propagates at once. Backoff is exponential with
        jitter, capped at ``retry_max_s``. Raises ``_Stopping`` when ``stop()`` is called
        meanwhile, so the caller leaves the batch uncommitted.
        """
        delay = self.config.retry_initial_s
        paused = False
        try:
            while True:
                try:
                    return await op()
                except Exception as exc:
                    if not transient(exc):
                        raise
                    failures.inc()
                    self.health.last_error = f"{what}: {describe(exc)}"[:300]
                    if not paused:
                        self._pause(partitions)
                        paused = True
                    log.warning("%s failed (%s); retrying in %.1fs", what, exc, delay)
                    try:
                        pause_s = delay * random.uniform(0.5, 1.0)
                        await asyncio.wait_for(self._stopping.wait(), pause_s)
                        raise _Stopping from None
                    except TimeoutError:
                        pass
                    delay = min(delay * 2, self.config.retry_max_s)
        finally:
            if paused:
                self._resume(partitions)
