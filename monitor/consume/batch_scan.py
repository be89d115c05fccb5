"""Walking a partition's raw fetched log the way the consumer does, to find the record batch it
cannot decode (no I/O: bytes in, records and a description out, through aiokafka's record
classes).

The consumer decodes a fetched partition batch by batch: it checks each batch's CRC, skips
control batches, decompresses the batch (gzip, snappy, lz4, zstd) and parses its records,
dropping records below the fetch position. A batch that fails any of these steps (an unknown
codec id, a payload that does not decompress, a CRC mismatch, truncated records) makes the
whole fetch raise, and the records before it in the same fetch are dropped with it.

:func:`scan` repeats these steps over the same bytes: it returns the records decodable before
the first undecodable batch (at most ``limit``), and that batch (:class:`Undecodable`: its
offsets, codec, the error and its raw bytes), or None when every batch decodes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import CorruptRecordException
from aiokafka.record.memory_records import MemoryRecords

LOG_OVERHEAD = struct.calcsize(">qi")  # base offset, length: the frame of every batch
MAGIC_AT = struct.calcsize(">qii")  # base offset, length, partition leader epoch
ATTRIBUTES_AT = struct.calcsize(">qiibI")  # ... magic, crc (record batch v2)
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
REASON = "undecodable_batch"  # the dead-letter reason of such a batch


@dataclass(frozen=True)
class Undecodable:
    """A record batch of ``tp`` the consumer cannot decode: offsets ``first`` to ``next - 1``."""

    tp: TopicPartition
    first: int
    next: int
    codec: str
    error: str
    raw: bytes

    def describe(self) -> str:
        """The batch's offsets, partition, codec and error, in one line."""
        n = self.next - self.first
        return (
            f"offsets {self.first}-{self.next - 1} ({n} offset{'s' * (n != 1)}) of "
            f"{self.tp.topic}[{self.tp.partition}]: {self.codec} record batch: {self.error}"
        )


@dataclass(frozen=True)
class Scan:
    """What :func:`scan` found: ``records`` decodable from the position on, then ``bad`` (the
    first undecodable batch) or None; ``resume`` is the offset after both, where the partition
    is read on (None when nothing was consumed)."""

    records: list[ConsumerRecord[bytes, bytes]]
    bad: Undecodable | None
    resume: int | None


def codec_of(frame: bytes | memoryview) -> str:
    """The codec a v2 record batch's attributes name ("codec 5" for an id Kafka does not
    define, "unknown" when the frame is too short or not v2)."""
    if len(frame) < ATTRIBUTES_AT + 2 or frame[MAGIC_AT] < 2:
        return "unknown"
    codec = struct.unpack_from(">h", frame, ATTRIBUTES_AT)[0] & 0x07
    return CODECS.get(codec, f"codec {codec}")


def _record(tp: TopicPartition, r: Any) -> ConsumerRecord[bytes, bytes]:
    """The consumer's record of ``r``, a decoded record (built as the consumer builds it)."""
    key, value = r.key, r.value
    key_size = len(key) if key is not None else -1
    value_size = len(value) if value is not None else -1
    return ConsumerRecord(
        tp.topic,
        tp.partition,
        r.offset,
        r.timestamp,
        r.timestamp_type,
        key,
        value,
        r.checksum,
        key_size,
        value_size,
        tuple(r.headers),
    )


def scan(tp: TopicPartition, position: int, data: bytes, limit: int) -> Scan:
    """Decode ``data`` (a fetch response's record set of ``tp``, fetched at ``position``) batch
    by batch like the consumer (module docstring), up to the first undecodable batch or
    ``limit`` records."""
    records: list[ConsumerRecord[bytes, bytes]] = []
    resume: int | None = None
    view = memoryview(data)
    pos = 0
    while len(view) - pos >= LOG_OVERHEAD:
        base, length = struct.unpack_from(">qi", view, pos)
        end = pos + LOG_OVERHEAD + length
        if length < 0 or end > len(view):
            break  # a partial batch at the end of the fetch: the next fetch has it whole
        frame = bytes(view[pos:end])
        pos = end
        next_offset = base + 1
        try:
            batch = MemoryRecords(frame).next_batch()
            next_offset = batch.next_offset
            if not batch.validate_crc():
                raise CorruptRecordException(f"invalid CRC (stored {batch.crc:#010x})")
            if getattr(batch, "is_control_batch", False):
                resume = max(resume or 0, next_offset)
                continue
            decoded = [_record(tp, r) for r in batch if r.offset >= position]
        except Exception as exc:
            first = max(base, position)
            error = f"{type(exc).__name__}: {exc}"
            bad = Undecodable(tp, first, max(next_offset, first + 1), codec_of(frame), error, frame)
            return Scan(records, bad, bad.next)
        for rec in decoded:
            if len(records) >= limit:
                return Scan(records, None, records[-1].offset + 1)
            records.append(rec)
        resume = max(resume or 0, next_offset)
    return Scan(records, None, resume)
