"""What the ingest loop does when the group rebalances: a revocation waits for the batch in
flight (its write and offset commit finish before the partitions move), an assignment is logged.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import TopicPartition
from aiokafka.abc import ConsumerRebalanceListener

log = logging.getLogger("monitor.ingest")


class WaitForBatch(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, lock: asyncio.Lock) -> None:
        self._lock = lock

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        async with self._lock:  # the batch in flight commits before partitions move
            pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        log.info("assigned partitions: %s", sorted(tp.partition for tp in assigned))
