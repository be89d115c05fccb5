"""Offset bookkeeping of the ingest loop: bounded commits, lag, broker data loss.

A mixin of :class:`monitor.ingest.loop.IngestLoop` (see its module contract): ``_commit``
bounds each offset commit by ``commit_timeout_s`` and reports failures once per run of them;
``_update_lag`` keeps the lag gauge and the health's lag and re-reads a partition the broker lost
(``_lost_data``); ``_delivered_below`` notices a batch that starts below the loop's position.

Broker data loss (restarted without persistent storage, topic recreated) shows in two ways:

- the consumer itself resets to the earliest offset (the fetch was out of range;
  ``auto_offset_reset=earliest``) and delivers records below our position:
  ``_delivered_below`` logs and counts it; nothing else to do;
- the consumer waits at our position beyond the new log end: ``_lost_data`` seeks to the
  beginning when the reported log end is below our position **and no record of the partition
  arrived for** :data:`LOSS_CONFIRM_S` (``_saw_records`` notes arrivals), at most once per
  reported log end. The reported log end alone is not evidence: an in-memory broker restarted
  with a recreated topic was seen serving records up to offset 15 while reporting a log end of
  5; trusting it re-read the partition from the beginning at every batch, and ingest fell
  behind (docs/robustness.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from monitor.ingest.health import IngestHealth
from monitor.telemetry.ops_metrics import OpsMetrics

if TYPE_CHECKING:
    from monitor.core.clock import Clock
    from monitor.ingest.config import IngestConfig

log = logging.getLogger("monitor.ingest")

LOSS_CONFIRM_S = 3.0
"""How long a partition must receive nothing, with its log end below our position, before the
loop re-reads it from the beginning."""


class OffsetTracking:
    """Commits, lag and data-loss detection over the loop's consumer and positions."""

    config: IngestConfig
    clock: Clock
    metrics: OpsMetrics
    health: IngestHealth
    _consumer: AIOKafkaConsumer | None
    _positions: dict[TopicPartition, int]
    _lost: set[TopicPartition]
    _arrived: dict[TopicPartition, float]
    _sought: dict[TopicPartition, int]
    _fetched: dict[TopicPartition, int | None]

    def _saw_records(self, tps: Iterable[TopicPartition], now: float) -> None:
        """Note that records of ``tps`` arrived at monotonic time ``now``."""
        for tp in tps:
            self._arrived[tp] = now

    def _delivered_below(self, tp: TopicPartition, first: int) -> None:
        """Log and count once when a batch of ``tp`` starts below our position: the consumer
        reset to the earliest offset of a topic the broker lost."""
        pos = self._positions.get(tp)
        if pos is None or first >= pos:
            return
        log.error(
            "partition %s[%s]: the broker delivered offset %d, below our position %d: the "
            "broker lost data (restarted without persistent storage, or the topic was "
            "recreated). Resuming from its earliest offset; events already stored are kept, "
            "and what the broker lost must be re-sent by producers.",
            tp.topic, tp.partition, first, pos,
        )  # fmt: skip
        self.metrics.broker_data_loss.inc()

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit ``offsets``, bounded in time; a failure is logged once per run of failures."""
        assert self._consumer is not None
        try:
            await asyncio.wait_for(self._consumer.commit(offsets), self.config.commit_timeout_s)
        except CommitFailedError:
            # the group rebalanced while we wrote; the new owner re-reads the batch and the
            # writer absorbs it idempotently
            log.warning("offset commit failed after a rebalance; batch will be re-delivered")
        except (TimeoutError, KafkaError) as exc:
            self.metrics.commit_errors.inc()
            what = type(exc).__name__
            if self.health.commit_failures == 0:
                log.error(
                    "offset commit failed (%s): the batch is stored, its offsets are not "
                    "committed (re-delivered and absorbed after a restart). If the broker lost "
                    "the topic or the group's offsets (restarted without persistent storage), "
                    "producers must re-send what the broker lost; the consumer resumes from the "
                    "earliest offset of the recreated topic. Logged once until a commit succeeds.",
                    what,
                )
            self.health.commit_failures += 1
            self.health.last_error = f"offset commit: {what}"
            return
        if self.health.commit_failures:
            log.warning("offset commits succeed again after %d failures",
                        self.health.commit_failures)  # fmt: skip
        self.health.commit_failures = 0

    def _lost_data(self, tp: TopicPartition, now: float) -> bool:
        """True when ``tp`` must be re-read from its earliest offset (module docstring): its
        reported log end is below our position, nothing arrived for :data:`LOSS_CONFIRM_S`, and
        it was not re-read for this log end yet. Logged and counted once per occurrence."""
        assert self._consumer is not None
        high, pos = self._consumer.highwater(tp), self._positions.get(tp)
        if high is None or pos is None or high >= pos:
            self._lost.discard(tp)
            return False
        arrived = self._arrived.setdefault(tp, now)
        if now - arrived < LOSS_CONFIRM_S or self._sought.get(tp) == high:
            return False
        self._sought[tp] = high
        if tp not in self._lost:
            log.error(
                "partition %s[%s]: the broker's log ends at %d, below our position %d, and "
                "nothing arrived for %.0f s: the broker lost data (restarted without persistent "
                "storage, or the topic was recreated). Resuming from its earliest offset; "
                "events already stored are kept, and what the broker lost must be re-sent by "
                "producers.",
                tp.topic, tp.partition, high, pos, LOSS_CONFIRM_S,
            )  # fmt: skip
            self._lost.add(tp)
            self.metrics.broker_data_loss.inc()
        return True

    async def _update_lag(self) -> None:
        """Consumer lag per assigned partition: high watermark minus next offset to process.

        A partition whose log end fell below our position (:meth:`_lost_data`) resumes from
        its earliest offset."""
        consumer = self._consumer
        if consumer is None:
            return
        total = 0
        now = self.clock.monotonic()
        for tp in consumer.assignment():
            if self._lost_data(tp, now):
                await consumer.seek_to_beginning(tp)
                del self._positions[tp]
                self._fetched[tp] = None  # read on from the log start
                continue
            high, pos = consumer.highwater(tp), self._positions.get(tp)
            if high is not None and pos is not None:
                total += max(0, high - pos)
                self.metrics.consumer_lag.labels(str(tp.partition)).set(max(0, high - pos))
        self.health.lag = total
