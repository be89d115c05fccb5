"""Offset bookkeeping of the ingest loop: bounded commits, lag, broker data loss.

A mixin of :class:`monitor.ingest.loop.IngestLoop` (see its module contract): ``_commit``
bounds each offset commit by ``commit_timeout_s`` and reports failures once per run of them;
``_update_lag`` keeps the lag gauge and the health's lag; ``_lost_data`` detects a partition
whose log end fell below the loop's position (the broker lost data).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from monitor.ingest.health import IngestHealth
from monitor.worker.ops_metrics import OpsMetrics

if TYPE_CHECKING:
    from monitor.ingest.config import IngestConfig

log = logging.getLogger("monitor.ingest")


class OffsetTracking:
    """Commits, lag and data-loss detection over the loop's consumer and positions."""

    config: IngestConfig
    metrics: OpsMetrics
    health: IngestHealth
    _consumer: AIOKafkaConsumer | None
    _positions: dict[TopicPartition, int]
    _lost: set[TopicPartition]

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

    def _lost_data(self, tp: TopicPartition) -> bool:
        """True when ``tp``'s log end is below our position: the broker lost data. Logged and
        counted once per partition and occurrence."""
        assert self._consumer is not None
        high, pos = self._consumer.highwater(tp), self._positions.get(tp)
        if high is None or pos is None or high >= pos:
            self._lost.discard(tp)
            return False
        if tp not in self._lost:
            log.error(
                "partition %s[%s]: the broker's log ends at %d, below our position %d: the "
                "broker lost data (restarted without persistent storage, or the topic was "
                "recreated). Resuming from its earliest offset; events already stored are kept, "
                "and what the broker lost must be re-sent by producers.",
                tp.topic, tp.partition, high, pos,
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
        for tp in consumer.assignment():
            if self._lost_data(tp):
                await consumer.seek_to_beginning(tp)
                del self._positions[tp]
                continue
            high, pos = consumer.highwater(tp), self._positions.get(tp)
            if high is not None and pos is not None:
                total += max(0, high - pos)
                self.metrics.consumer_lag.labels(str(tp.partition)).set(max(0, high - pos))
        self.health.lag = total
