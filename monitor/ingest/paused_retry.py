"""Retrying an operation of the ingest loop with its partitions paused (backpressure).

:class:`PausedRetry` runs a store write or a DLQ publish until it succeeds, pausing the batch's
partitions on the consumer while it fails transiently so that nothing more is fetched, and gives
up with ``_Stopping`` when the loop is asked to stop (the caller then leaves the batch
uncommitted). Two batches in flight may retry at once: a partition stays paused until no retry
that paused it is still failing.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import Counter

from monitor.ingest.health import IngestHealth
from monitor.store.store_errors import describe
from monitor.telemetry.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.ingest")
T = TypeVar("T")


class _Stopping(Exception):
    """``stop()`` was called while an operation was being retried."""


class PausedRetry:
    """Retries with backpressure for one ingest loop.

    Owns: which partitions are paused and by how many failing retries (:attr:`paused`).
    Reads: ``stopping`` (the loop's stop request), the backoff bounds ``initial_s`` and
    ``max_s``. Writes: the ``paused`` gauge of ``metrics``; ``paused`` and ``last_error`` of
    ``health`` (``last_error`` is cleared once nothing is paused any more).
    Backpressure contract: while any retry of a partition fails, the partition is paused on the
    consumer passed to :meth:`retry` (nothing more of it is fetched); it is resumed when the
    last of them ends, whether it succeeded, raised or stopped.
    """

    def __init__(
        self,
        metrics: OpsMetrics,
        health: IngestHealth,
        stopping: asyncio.Event,
        initial_s: float,
        max_s: float,
    ) -> None:
        self._metrics = metrics
        self._health = health
        self._stopping = stopping
        self._initial_s = initial_s
        self._max_s = max_s
        self._paused_by: Tally[TopicPartition] = Tally()  # partition -> failing retries

    @property
    def paused(self) -> Mapping[TopicPartition, int]:
        """Each paused partition and how many retries that paused it are still failing
        (empty when nothing is paused)."""
        return self._paused_by

    def _pause(self, consumer: AIOKafkaConsumer | None, partitions: list[TopicPartition]) -> None:
        self._paused_by.update(partitions)
        if consumer is not None:
            consumer.pause(*partitions)
        self._metrics.paused.set(1)
        self._health.paused = True

    def _resume(self, consumer: AIOKafkaConsumer | None, partitions: list[TopicPartition]) -> None:
        self._paused_by.subtract(partitions)
        free = [tp for tp in partitions if self._paused_by[tp] <= 0]
        for tp in free:
            del self._paused_by[tp]
        if consumer is not None and free:
            consumer.resume(*free)
        if not self._paused_by:
            self._metrics.paused.set(0)
            self._health.paused = False
            self._health.last_error = ""

    async def retry(
        self,
        consumer: AIOKafkaConsumer | None,
        op: Callable[[], Awaitable[T]],
        what: str,
        transient: Callable[[BaseException], bool],
        failures: Counter,
        partitions: list[TopicPartition],
    ) -> T:
        """Run ``op`` until it succeeds, pausing ``partitions`` on ``consumer`` (None: the
        bookkeeping only) while it fails transiently.

        An error ``transient`` does not accept propagates at once. Each transient failure
        counts in ``failures``. Backoff is exponential with jitter, capped at ``max_s``. Raises
        ``_Stopping`` when ``stopping`` is set meanwhile, so the caller leaves the batch
        uncommitted.
        """
        delay = self._initial_s
        paused = False
        try:
            while True:
                try:
                    return await op()
                except Exception as exc:
                    if not transient(exc):
                        raise
                    failures.inc()
                    self._health.last_error = f"{what}: {describe(exc)}"[:300]
                    if not paused:
                        self._pause(consumer, partitions)
                        paused = True
                    log.warning("%s failed (%s); retrying in %.1fs", what, exc, delay)
                    try:
                        pause_s = delay * random.uniform(0.5, 1.0)
                        await asyncio.wait_for(self._stopping.wait(), pause_s)
                        raise _Stopping from None
                    except TimeoutError:
                        pass
                    delay = min(delay * 2, self._max_s)
        finally:
            if paused:
                self._resume(consumer, partitions)
