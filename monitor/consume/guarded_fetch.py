"""A consumer's fetch, guarded against record batches the consumer cannot decode.

Every Kafka codec (gzip, snappy, lz4, zstd) decodes with the project's dependencies; a batch
that still does not decode (a corrupt payload, a codec id Kafka does not define, a CRC
mismatch, truncated records) makes the consumer's ``getmany`` raise, fetch after fetch, and
drop the records it had already taken from the same fetch, of that partition and of partitions
drained before it in the same call (their positions moved past records never returned).

:meth:`GuardedFetch.fetch` catches such an error (:func:`may_be_undecodable`) and recovers:

1. every assigned partition is sought back to the offset after the last record the caller
   received from it (before any: the group's committed offset, else the log start), so
   nothing the consumer dropped is skipped;
2. the partitions are fetched again, raw, one at a time from that offset, and walked like the
   consumer walks them (:func:`monitor.consume.batch_scan.scan`); the first partition holding
   an undecodable batch (or ``max_records`` decodable records before one) is returned as the
   batch: its decodable records before the bad batch, and the bad batch
   (:class:`~monitor.consume.batch_scan.Undecodable`), which the caller dead-letters or counts
   and commits past (:func:`ends`), like any poison record;
3. that partition is sought to the offset after what was returned; the others are fetched
   again by the consumer.

When no partition reproduces the error, it is re-raised (the caller ends; its ``/health`` says
so). The raw fetch reads ``read_uncommitted`` like the consumers and skips control batches.

**Gaps.** A fetch can also return a partition's records with offsets missing before them: the
in-memory Tansu broker of the embedded stack (0.6) makes a batch readable before an earlier
batch of the same partition written concurrently by another producer (acknowledged, readable
tens of milliseconds later), and a consumer that took the later batch has moved past the
earlier one for good: its records were never stored, though the broker acknowledged them
(``bench/soak.py``'s lost events). So :meth:`GuardedFetch.fetch` checks each partition's
offsets against the offset after the last record it returned: at a gap it returns the records
before it only, seeks the partition back to the gap and reads it again at the next fetch; a gap
still there after :data:`GAP_CONFIRM_S` is taken as one no record will fill (a transactional
producer's control records, a compacted topic) and the records after it are returned. Each
such gap holds its partition that long (not the others); the monitor's own producers write no
control records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import (
    ConsumerStoppedError,
    CorruptRecordException,
    KafkaError,
    UnsupportedCodecError,
    for_code,
)
from aiokafka.protocol.fetch import FetchRequest

from monitor.consume.batch_scan import Undecodable, scan

log = logging.getLogger("monitor.consume")

Record: TypeAlias = ConsumerRecord[bytes, bytes]
Fetched = tuple[dict[TopicPartition, list[Record]], list[Undecodable]]


GAP_CONFIRM_S = 1.0
"""How long a gap in a partition's offsets is read again before it is taken as real (module
docstring). Tansu fills its gaps in tens of milliseconds (34 ms seen at load average 9)."""

FETCH_DEFAULTS = {  # aiokafka's consumer defaults
    "max_partition_fetch_bytes": 1024 * 1024,
    "fetch_max_bytes": 52_428_800,
    "fetch_max_wait_ms": 500,
}


@dataclass(frozen=True)
class Gap:
    """Offsets missing in a partition's records: ``start`` is the first missing one, ``since``
    when the fetch first saw it (monotonic seconds)."""

    start: int
    since: float


@dataclass(frozen=True)
class Held:
    """What :func:`held_at` found in a partition's fetched records: ``cut``, the index of the
    first record after a gap still held (None: return them all); ``gap``, the gap held from
    then on; ``passed``, the start of a held gap confirmed now (no record filled it)."""

    cut: int | None = None
    gap: Gap | None = None
    passed: int | None = None


def held_at(expected: int | None, offsets: Sequence[int], gap: Gap | None, now: float) -> Held:
    """Where a partition's fetched records must be cut (pure; module docstring, "Gaps").

    ``expected``: the offset after the last record returned before (None: unknown, the first
    record is not checked); ``offsets``: the fetched records' offsets, in order; ``gap``: the
    gap held so far. A gap is held from when it is first seen until :data:`GAP_CONFIRM_S` later;
    then it is passed (the records after it are returned) and the next one, if any, checked."""
    passed = None
    for i, offset in enumerate(offsets):
        if expected is not None and offset > expected:
            if gap is None or gap.start != expected:
                return Held(i, Gap(expected, now), passed)
            if now - gap.since < GAP_CONFIRM_S:
                return Held(i, gap, passed)
            passed, gap = expected, None
        expected = offset + 1
    return Held(passed=passed)


def may_be_undecodable(exc: BaseException) -> bool:
    """Whether ``getmany`` may have raised ``exc`` for a batch it cannot decode: the consumer's
    codec and CRC errors, and whatever a codec library raises; not its other Kafka errors nor
    its stop."""
    if isinstance(exc, UnsupportedCodecError | CorruptRecordException):
        return True
    return isinstance(exc, Exception) and not isinstance(exc, KafkaError | ConsumerStoppedError)


class GuardedFetch:
    """A consumer's fetch (module docstring).

    Owns: per assigned partition, the offset after the last record it returned (None: read
    on from the log start, :meth:`from_start`), which is where step 1 seeks back to and where
    the next record is expected (gaps, module docstring), and the gap it holds, if any; counts
    the gaps held (``gaps_held``) and passed (``gaps_passed``). Reads:
    the consumer passed to each call, and ``consumer_settings`` (the consumer's aiokafka
    settings; aiokafka's defaults where they name no ``max_partition_fetch_bytes``,
    ``fetch_max_bytes`` or ``fetch_max_wait_ms``) for the size of a raw fetch. Commits
    nothing: what it returns is committed by the caller after its work, like any batch.
    """

    def __init__(
        self,
        consumer_settings: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = {**FETCH_DEFAULTS, **(consumer_settings or {})}
        self._clock = clock
        self._fetched: dict[TopicPartition, int | None] = {}  # next offset received
        self._gaps: dict[TopicPartition, Gap] = {}
        self.gaps_held = 0  # gaps seen (each read again until filled or confirmed)
        self.gaps_passed = 0  # gaps confirmed after GAP_CONFIRM_S: no record filled them

    async def fetch(self, consumer: AIOKafkaConsumer, timeout_ms: int, max_records: int) -> Fetched:
        """The next batch by partition and the undecodable batches it ends with (module
        docstring)."""
        try:
            batch: dict[TopicPartition, list[Record]] = await consumer.getmany(
                timeout_ms=timeout_ms, max_records=max_records
            )
        except Exception as exc:
            if not may_be_undecodable(exc):
                raise
            return await self._recover(consumer, exc, max_records)
        batch = self._hold_gaps(consumer, batch)
        for tp, recs in batch.items():
            self._fetched[tp] = recs[-1].offset + 1
        return batch, []

    def _hold_gaps(
        self, consumer: AIOKafkaConsumer, batch: dict[TopicPartition, list[Record]]
    ) -> dict[TopicPartition, list[Record]]:
        """``batch`` without the records after a gap still held; each partition cut so is
        sought back to its gap and read again (module docstring, "Gaps")."""
        now = self._clock()
        out = {}
        for tp, recs in batch.items():
            expected = self._fetched.get(tp)
            first, last = recs[0].offset, recs[-1].offset
            contiguous = last - first == len(recs) - 1 and (expected is None or first <= expected)
            if contiguous and tp not in self._gaps:  # the common case, at no cost
                out[tp] = recs
                continue
            before = self._gaps.pop(tp, None)
            held = held_at(expected, [r.offset for r in recs], before, now)
            if held.passed is not None:
                self.gaps_passed += 1
                log.warning(
                    "partition %s[%s]: offsets from %d on were not returned for %.0f ms; "
                    "taken as records no fetch returns (control records, compaction)",
                    tp.topic,
                    tp.partition,
                    held.passed,
                    GAP_CONFIRM_S * 1000,
                )
            if held.gap is not None:
                if held.gap != before:
                    self.gaps_held += 1
                    log.info(
                        "partition %s[%s]: offsets from %d on not returned before later ones; "
                        "read again (a batch written concurrently, not yet readable)",
                        tp.topic,
                        tp.partition,
                        held.gap.start,
                    )
                self._gaps[tp] = held.gap
                _seek(consumer, tp, held.gap.start)
            if held.cut is None:
                out[tp] = recs
            elif held.cut:
                out[tp] = recs[: held.cut]
        return out

    def forget(self, revoked: Iterable[TopicPartition]) -> None:
        """Partitions revoked: their new owner starts from the committed offsets."""
        for tp in revoked:
            self._fetched.pop(tp, None)
            self._gaps.pop(tp, None)

    def from_start(self, tp: TopicPartition) -> None:
        """``tp`` was sought to its log start: a recovery reads it on from there."""
        self._fetched[tp] = None
        self._gaps.pop(tp, None)

    async def _restart_point(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> int:
        """The offset after the last record received from ``tp`` (step 1)."""
        at = self._fetched.get(tp)
        if at is None and tp not in self._fetched:
            at = await consumer.committed(tp)
        if at is None:
            at = (await consumer.beginning_offsets([tp]))[tp]
        return int(at)

    async def _recover(
        self, consumer: AIOKafkaConsumer, exc: Exception, max_records: int
    ) -> Fetched:
        what = f"{type(exc).__name__}: {exc}"
        log.warning("the consumer could not decode a fetch (%s); locating the batch", what)
        assigned = sorted(consumer.assignment())
        starts = {tp: await self._restart_point(consumer, tp) for tp in assigned}
        for tp, at in starts.items():
            _seek(consumer, tp, at)
        for tp, at in starts.items():
            found = scan(tp, at, await self._fetch_raw(consumer, tp, at), max_records)
            if found.bad is None and len(found.records) < max_records:
                continue  # every batch of this partition decodes
            assert found.resume is not None
            _seek(consumer, tp, found.resume)
            self._fetched[tp] = found.resume
            if (bad := found.bad) is not None:
                log.error(
                    "partition %s[%s]: the record batch at offsets %d-%d (%s) cannot be "
                    "decoded (%s); dead-lettered as undecodable_batch and skipped",
                    tp.topic,
                    tp.partition,
                    bad.first,
                    bad.next - 1,
                    bad.codec,
                    bad.error,
                )
            batch = {tp: found.records} if found.records else {}
            return batch, [bad] if bad is not None else []
        log.error("no assigned partition holds an undecodable batch; %s is not one", what)
        raise exc

    async def _fetch_raw(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int
    ) -> bytes:
        """The record set the broker returns for ``tp`` at ``offset`` (one partition fetch of
        the consumer's size), undecoded; empty when the broker answers with an error."""
        client = consumer._client  # the consumer's connections and broker versions
        node = client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            await client.force_metadata_update()
            node = client.cluster.leader_for_partition(tp)
        settings = self._settings
        part = (tp.partition, offset, settings["max_partition_fetch_bytes"])
        wait_ms = settings["fetch_max_wait_ms"]  # the broker answers at once when it has data
        request = FetchRequest(wait_ms, 1, settings["fetch_max_bytes"], 0, [(tp.topic, [part])])
        response = await client.send(node, request)
        for _topic, partitions in response.topics:
            for partition, error_code, _highwater, *data in partitions:
                if partition != tp.partition:
                    continue
                if error_code:  # not readable now: not the partition that failed to decode
                    why = for_code(error_code).__name__
                    log.warning("raw fetch of %s at %d failed (%s)", tp, offset, why)
                    return b""
                return bytes(data[-1] or b"")
        return b""


def _seek(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> None:
    """Seek ``tp`` to ``offset`` unless it was revoked meanwhile (the records returned for it
    are then dropped by the write, ``Decoded.keep``)."""
    if tp in consumer.assignment():
        consumer.seek(tp, offset)


def ends(fetched: Fetched) -> dict[TopicPartition, int]:
    """The offsets to commit once ``fetched`` is done: per partition, the one after its last
    record or after its undecodable batch."""
    batch, bad = fetched
    out = {tp: recs[-1].offset + 1 for tp, recs in batch.items() if recs}
    for b in bad:
        out[b.tp] = max(out.get(b.tp, 0), b.next)
    return out
