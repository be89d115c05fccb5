"""Offset bookkeeping of the ingest loop: bounded commits, lag, broker data loss.

:class:`OffsetTracker` commits a batch's offsets bounded by ``commit_timeout_s`` and reports
failures once per run of them (:meth:`~OffsetTracker.commit`); keeps the lag gauge and the
health's lag and re-reads a partition the broker lost (:meth:`~OffsetTracker.update_lag`);
notices a batch that starts below the loop's position (:meth:`~OffsetTracker.delivered_below`).

Broker data loss (restarted without persistent storage, topic recreated) shows in two ways:

- the consumer itself resets to the earliest offset (the fetch was out of range;
  ``auto_offset_reset=earliest``) and delivers records below our position:
  ``delivered_below`` logs and counts it; nothing else to do;
- the consumer waits at our position beyond the new log end: ``update_lag`` seeks to the
  beginning when the reported log end is below our position **and no record of the partition
  arrived for** :data:`LOSS_CONFIRM_S` (``saw_records`` notes arrivals), at most once per
  reported log end. The reported log end alone is not evidence: an in-memory broker restarted
  with a recreated topic can serve records beyond the log end it reports, and trusting it would
  re-read the partition from the beginning at every batch (docs/robustness.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from monitor.ingest.health import IngestHealth
from monitor.telemetry.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.ingest")

LOSS_CONFIRM_S = 3.0
"""How long a partition must receive nothing, with its log end below our position, before the
loop re-reads it from the beginning."""


class OffsetTracker:
    """The offsets of one ingest loop.

    Owns: the position of each partition (the next offset to process: the last committed
    batch's end), the partitions found lost, when records of each partition last arrived and the
    log end each was last re-read for. Reads: the consumer passed to each call (its commits,
    high watermarks, assignment and seeks). Writes: the ``commit_errors``,
    ``broker_data_loss`` and ``consumer_lag`` metrics; ``commit_failures``, ``last_error`` and
    ``lag`` of ``health``; calls ``reread(tp)`` when it seeks ``tp`` to its log start.
    Commit contract: :meth:`commit` is called with a batch's offsets only after the batch was
    written, in batch order; the position advances to them whether or not the commit
    succeeded (the batch is stored; a failed commit re-delivers it after a restart).
    """

    def __init__(
        self,
        metrics: OpsMetrics,
        health: IngestHealth,
        commit_timeout_s: float,
        reread: Callable[[TopicPartition], None],
    ) -> None:
        self._metrics = metrics
        self._health = health
        self._commit_timeout_s = commit_timeout_s
        self._reread = reread
        self._positions: dict[TopicPartition, int] = {}
        self._lost: set[TopicPartition] = set()
        self._arrived: dict[TopicPartition, float] = {}
        self._sought: dict[TopicPartition, int] = {}

    def saw_records(self, tps: Iterable[TopicPartition], now: float) -> None:
        """Note that records of ``tps`` arrived at monotonic time ``now``."""
        for tp in tps:
            self._arrived[tp] = now

    def delivered_below(self, tp: TopicPartition, first: int) -> None:
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
            tp.topic,
            tp.partition,
            first,
            pos,
        )
        self._metrics.broker_data_loss.inc()

    async def commit(self, consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int]) -> None:
        """Commit ``offsets`` (a written batch's), bounded in time, and advance the positions
        to them; a failure is logged once per run of failures and counted for ``/health``."""
        await self._send(consumer, offsets)
        self._positions.update(offsets)

    async def _send(self, consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int]) -> None:
        try:
            await asyncio.wait_for(consumer.commit(offsets), self._commit_timeout_s)
        except CommitFailedError:
            # the group rebalanced while we wrote; the new owner re-reads the batch and the
            # writer absorbs it idempotently
            log.warning("offset commit failed after a rebalance; batch will be re-delivered")
        except (TimeoutError, KafkaError) as exc:
            self._metrics.commit_errors.inc()
            what = type(exc).__name__
            if self._health.commit_failures == 0:
                log.error(
                    "offset commit failed (%s): the batch is stored, its offsets are not "
                    "committed (re-delivered and absorbed after a restart). If the broker lost "
                    "the topic or the group's offsets (restarted without persistent storage), "
                    "producers must re-send what the broker lost; the consumer resumes from the "
                    "earliest offset of the recreated topic. Logged once until a commit succeeds.",
                    what,
                )
            self._health.commit_failures += 1
            self._health.last_error = f"offset commit: {what}"
            return
        if self._health.commit_failures:
            log.warning(
                "offset commits succeed again after %d failures", self._health.commit_failures
            )
        self._health.commit_failures = 0

    def _lost_data(self, consumer: AIOKafkaConsumer, tp: TopicPartition, now: float) -> bool:
        """True when ``tp`` must be re-read from its earliest offset (module docstring): its
        reported log end is below our position, nothing arrived for :data:`LOSS_CONFIRM_S`, and
        it was not re-read for this log end yet. Logged and counted once per occurrence."""
        high, pos = consumer.highwater(tp), self._positions.get(tp)
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
                tp.topic,
                tp.partition,
                high,
                pos,
                LOSS_CONFIRM_S,
            )
            self._lost.add(tp)
            self._metrics.broker_data_loss.inc()
        return True

    async def update_lag(self, consumer: AIOKafkaConsumer, now: float) -> None:
        """Consumer lag per assigned partition: high watermark minus next offset to process,
        at monotonic time ``now``.

        A partition whose log end fell below our position (:meth:`_lost_data`) resumes from
        its earliest offset."""
        total = 0
        for tp in consumer.assignment():
            if self._lost_data(consumer, tp, now):
                await consumer.seek_to_beginning(tp)
                del self._positions[tp]
                self._reread(tp)  # read on from the log start
                continue
            high, pos = consumer.highwater(tp), self._positions.get(tp)
            if high is not None and pos is not None:
                total += max(0, high - pos)
                self._metrics.consumer_lag.labels(str(tp.partition)).set(max(0, high - pos))
        self._health.lag = total
