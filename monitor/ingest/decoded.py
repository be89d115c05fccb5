"""A fetched batch of the ingest loop, decoded, waiting for (or in) its write."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TypeAlias

from aiokafka import ConsumerRecord, TopicPartition

from monitor.ingest.rows import PARTITION, DeadLetter, EventRow

Record: TypeAlias = ConsumerRecord[bytes, bytes]


@dataclass
class Decoded:
    """A fetched batch, decoded: its records by partition, the rows and dead letters decoded
    from them, how long that took, and whether its write checked it against the assignment."""

    batch: dict[TopicPartition, list[Record]]
    records: list[Record]
    rows: list[EventRow]
    dead: list[DeadLetter]
    seconds: float  # decode time
    kept: asyncio.Event = field(default_factory=asyncio.Event)  # set once checked by ``keep``

    def keep(self, assigned: set[TopicPartition]) -> None:
        """Drop the records of partitions not in ``assigned`` (revoked since the fetch)."""
        if set(self.batch) <= assigned:
            return
        self.batch = {tp: recs for tp, recs in self.batch.items() if tp in assigned}
        kept = {tp.partition for tp in self.batch}
        self.records = [r for r in self.records if r.partition in kept]
        self.rows = [r for r in self.rows if r[PARTITION] in kept]
        self.dead = [d for d in self.dead if d.partition in kept]
