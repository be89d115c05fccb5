"""A fetched batch of the ingest loop, decoded, waiting for (or in) its write."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeAlias

from aiokafka import ConsumerRecord, TopicPartition

from monitor.consume.batch_scan import REASON, Undecodable
from monitor.consume.guarded_fetch import ends
from monitor.ingest.decoding import chunks, decode_records
from monitor.ingest.rows import PARTITION, DeadLetter, EventRow

Record: TypeAlias = ConsumerRecord[bytes, bytes]

DECODE_CHUNK = 100  # records decoded between two yields to the event loop


@dataclass
class Decoded:
    """A fetched batch, decoded: its records by partition, the rows and dead letters decoded
    from them (with one per undecodable record batch in ``bad``, which follows the records of
    its partition), how long that took, and whether its write checked it against the
    assignment."""

    batch: dict[TopicPartition, list[Record]]
    records: list[Record]
    rows: list[EventRow]
    dead: list[DeadLetter]
    seconds: float  # decode time
    bad: list[Undecodable] = field(default_factory=list)
    kept: asyncio.Event = field(default_factory=asyncio.Event)  # set once checked by ``keep``
    copied: asyncio.Event = field(default_factory=asyncio.Event)  # set once its rows are sent

    @classmethod
    async def of(
        cls,
        batch: dict[TopicPartition, list[Record]],
        now: datetime,
        max_skew: timedelta | None,
        monotonic: Callable[[], float],
        origin_key: bytes | None = None,
    ) -> Decoded:
        """Decode ``batch`` (``decode_records``) in chunks of ``DECODE_CHUNK`` records, yielding
        to the event loop between chunks so that the writes in flight progress and commit."""
        started = monotonic()
        records = [rec for recs in batch.values() for rec in recs]
        rows: list[EventRow] = []
        dead: list[DeadLetter] = []
        for chunk in chunks(records, DECODE_CHUNK):
            chunk_rows, chunk_dead = decode_records(chunk, now, max_skew, origin_key)
            rows += chunk_rows
            dead += chunk_dead
            await asyncio.sleep(0)
        return cls(batch, records, rows, dead, monotonic() - started)

    def skip(self, bad: list[Undecodable]) -> None:
        """Add the undecodable record batches ``bad``, each after the records of its partition:
        its dead letter is written and its offsets committed with the batch."""
        self.bad += bad
        self.dead += [dead_letter_of(b) for b in bad]

    def ends(self) -> dict[TopicPartition, int]:
        """The offsets to commit: per partition, the one after its last record or after its
        undecodable batch."""
        return ends((self.batch, self.bad))

    def keep(self, assigned: set[TopicPartition]) -> None:
        """Drop the records of partitions not in ``assigned`` (revoked since the fetch)."""
        if set(self.ends()) <= assigned:
            return
        self.batch = {tp: recs for tp, recs in self.batch.items() if tp in assigned}
        self.bad = [b for b in self.bad if b.tp in assigned]
        kept = {tp.partition for tp in self.batch} | {b.tp.partition for b in self.bad}
        self.records = [r for r in self.records if r.partition in kept]
        self.rows = [r for r in self.rows if r[PARTITION] in kept]
        self.dead = [d for d in self.dead if d.partition in kept]


def dead_letter_of(bad: Undecodable) -> DeadLetter:
    """The dead letter of an undecodable batch: reason ``undecodable_batch``, offset ``first``,
    the batch's bytes as the broker holds them (compressed) and its offset range in the detail."""
    tp = bad.tp
    return DeadLetter(tp.topic, tp.partition, bad.first, REASON, None, bad.describe(), bad.raw)
