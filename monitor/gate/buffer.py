"""The gate's disk buffer: decision events the broker has not acknowledged (I/O edge: files).

An append-only log of segment files (``seg-<n>.log``) in one directory, owned by one gate process
(two processes must not share a directory). A record is a 16-byte header (payload length, CRC32
of the payload, the time it was written in ms) and the payload (key length, Kafka key, value).

Contract:

- :meth:`DiskBuffer.append` returns once the records are written **and fsynced** (file and, for
  a new segment, the directory): from then on they survive a killed process, an OS crash or a
  power loss (as far as the disk honours fsync). One fsync per call, whatever its size.
- :meth:`DiskBuffer.read` returns the oldest unacknowledged records in the order they were
  appended; :meth:`DiskBuffer.ack` moves the cursor past them (the cursor file is replaced
  atomically) and deletes the segments wholly behind it. A crash between a delivery and its
  ``ack`` re-delivers those records after the restart (at least once; the store deduplicates
  by ``event_id``).
- A torn or corrupt record (a crash in the middle of a write) ends its segment's readable part:
  the rest of that segment is skipped and counted in ``dropped["corrupt"]``. Appends after an
  open always go to a new segment, so a torn tail is never written over.
- One process per directory: the directory is locked (``flock``) while a buffer is open; a
  second process pointed at it stops with :class:`BufferInUse`.
- Size cap ``max_bytes``: an append that would pass it first deletes whole oldest segments, their
  unacknowledged records counted in ``dropped["full"]`` (the newest decisions are kept).

Thread-safe (one lock): the gate process calls it from a thread pool so the event loop never
waits on the disk.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
import zlib
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from monitor.core.errors import BufferInUse
from monitor.gate.decision_outbox import BufferedRecord

HEADER = struct.Struct(">IIQ")  # payload length, crc32(payload), written at (ms since epoch)
KEYLEN = struct.Struct(">H")
CURSOR = "cursor"


@dataclass
class _Segment:
    number: int
    size: int = 0
    records: int = 0  # readable records in the file
    offsets: list[int] = field(default_factory=list)  # record start offsets (read from disk)


def _name(number: int) -> str:
    return f"seg-{number:012d}.log"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _lock_dir(directory: Path) -> int:
    """Hold an exclusive lock on ``directory/lock`` for the process's life (released by the
    kernel when it dies, even by SIGKILL). Raises BufferInUse when another process holds it."""
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise BufferInUse(
            f"{directory}: the gate's disk buffer is in use by another process (each gate "
            "process needs its own MONITOR_GATE_BUFFER_DIR)"
        ) from None
    return fd


class DiskBuffer:
    """The segment log in ``directory`` (created if missing); see the module docstring."""

    def __init__(
        self, directory: Path, max_bytes: int = 512 * 1024 * 1024, segment_bytes: int | None = None
    ) -> None:
        self.dir = directory
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or max(64 * 1024, min(8 * 1024 * 1024, max_bytes // 8))
        self.dropped: dict[str, int] = {"full": 0, "corrupt": 0}
        self._lock = threading.Lock()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock_dir(self.dir)
        self._segments: list[_Segment] = []
        self._cursor = (0, 0)
        self.pending = 0
        self.oldest_ms: int | None = None
        self._open()

    # --- opening ------------------------------------------------------------------------
    def close(self) -> None:
        """Release the directory lock (the files stay)."""
        with self._lock:
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    def _open(self) -> None:
        numbers = sorted(int(p.name[4:16]) for p in self.dir.glob("seg-*.log"))
        self._cursor = self._read_cursor()
        for number in numbers:
            if number < self._cursor[0]:  # wholly acknowledged, not yet deleted (crash)
                (self.dir / _name(number)).unlink(missing_ok=True)
                continue
            seg = self._scan(number)
            self._segments.append(seg)
        if self._segments and self._cursor[0] < self._segments[0].number:
            self._cursor = (self._segments[0].number, 0)
        self.pending = sum(self._unacked(s) for s in self._segments)
        self.oldest_ms = self._peek_oldest()
        last = self._segments[-1].number if self._segments else self._cursor[0]
        self._segments.append(_Segment(last + 1))  # never append behind a possibly torn tail
        self._create(self._segments[-1].number)

    def _read_cursor(self) -> tuple[int, int]:
        try:
            seg, off = (self.dir / CURSOR).read_text(encoding="ascii").split()
            return int(seg), int(off)
        except (OSError, ValueError):
            return (0, 0)

    def _scan(self, number: int) -> _Segment:
        data = (self.dir / _name(number)).read_bytes()
        seg = _Segment(number, size=len(data))
        pos = 0
        while pos + HEADER.size <= len(data):
            length, crc, _ = HEADER.unpack_from(data, pos)
            payload = data[pos + HEADER.size : pos + HEADER.size + length]
            if len(payload) < length or zlib.crc32(payload) != crc:
                break
            seg.offsets.append(pos)
            pos += HEADER.size + length
        seg.records = len(seg.offsets)
        if pos < len(data):  # a torn or corrupt tail: count what it may have held as one
            self.dropped["corrupt"] += 1
            seg.size = pos
        return seg

    def _unacked(self, seg: _Segment) -> int:
        if seg.number > self._cursor[0]:
            return seg.records
        if seg.number < self._cursor[0]:
            return 0
        return seg.records - bisect_left(seg.offsets, self._cursor[1])

    def _create(self, number: int) -> None:
        (self.dir / _name(number)).touch()
        _fsync_dir(self.dir)

    # --- appending ----------------------------------------------------------------------
    def append(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        """Write ``(key, value)`` records at the end and fsync (see the module docstring).
        Raises OSError when the disk refuses (nothing of this call is then counted)."""
        if not items:
            return
        now = int(time.time() * 1000)
        chunks = []
        for key, value in items:
            payload = KEYLEN.pack(len(key)) + key + value
            chunks.append(HEADER.pack(len(payload), zlib.crc32(payload), now) + payload)
        with self._lock:
            self._make_room(sum(len(c) for c in chunks))
            seg = self._segments[-1]
            if seg.size and seg.size >= self.segment_bytes:
                seg = _Segment(seg.number + 1)
                self._create(seg.number)
                self._segments.append(seg)
            with open(self.dir / _name(seg.number), "ab") as f:
                for c in chunks:
                    seg.offsets.append(seg.size)
                    seg.size += len(c)
                f.write(b"".join(chunks))
                f.flush()
                os.fsync(f.fileno())
            seg.records += len(chunks)
            self.pending += len(chunks)
            if self.oldest_ms is None:
                self.oldest_ms = now

    def _make_room(self, incoming: int) -> None:
        while len(self._segments) > 1 and self.bytes + incoming > self.max_bytes:
            seg = self._segments.pop(0)
            lost = self._unacked(seg)
            self.dropped["full"] += lost
            self.pending -= lost
            (self.dir / _name(seg.number)).unlink(missing_ok=True)
            if self._cursor[0] <= seg.number:
                self._cursor = (self._segments[0].number, 0)
            self.oldest_ms = self._peek_oldest()

    @property
    def bytes(self) -> int:
        """Bytes held in the segment files (acknowledged records included until their segment
        is deleted)."""
        return sum(s.size for s in self._segments)

    # --- replaying ----------------------------------------------------------------------
    def read(self, limit: int) -> list[BufferedRecord]:
        """Up to ``limit`` unacknowledged records, oldest first (nothing is removed)."""
        out: list[BufferedRecord] = []
        with self._lock:
            for seg in self._segments:
                if seg.number < self._cursor[0] or len(out) >= limit:
                    continue
                start = self._cursor[1] if seg.number == self._cursor[0] else 0
                first = bisect_left(seg.offsets, start)
                offsets = seg.offsets[first : first + limit - len(out)]
                if not offsets:
                    continue
                with open(self.dir / _name(seg.number), "rb") as f:
                    f.seek(offsets[0])
                    data = f.read(seg.size - offsets[0])
                for off in offsets:
                    length, _, written = HEADER.unpack_from(data, off - offsets[0])
                    at = off - offsets[0] + HEADER.size
                    (klen,) = KEYLEN.unpack_from(data, at)
                    key = data[at + 2 : at + 2 + klen]
                    value = data[at + 2 + klen : at + length]
                    end = (seg.number, off + HEADER.size + length)
                    out.append(BufferedRecord(key, value, written, end))
        return out

    def ack(self, end: tuple[int, int]) -> None:
        """Everything before ``end`` (a :attr:`BufferedRecord.end`) was acknowledged by the broker:
        move the cursor there (atomically, on disk) and delete the segments behind it."""
        with self._lock:
            if end <= self._cursor:
                return  # already acknowledged, or its segment was dropped for room
            acked = 0
            for seg in self._segments:
                if self._cursor[0] <= seg.number <= end[0]:
                    first = seg.number == self._cursor[0]
                    lo = bisect_left(seg.offsets, self._cursor[1]) if first else 0
                    hi = bisect_left(seg.offsets, end[1]) if seg.number == end[0] else seg.records
                    acked += max(0, hi - lo)
            self._cursor = end
            tmp = self.dir / (CURSOR + ".tmp")
            tmp.write_text(f"{end[0]} {end[1]}", encoding="ascii")
            os.replace(tmp, self.dir / CURSOR)
            while len(self._segments) > 1 and self._segments[0].number < end[0]:
                (self.dir / _name(self._segments.pop(0).number)).unlink(missing_ok=True)
            head = self._segments[0]
            if head.number == end[0] and end[1] >= head.size and len(self._segments) > 1:
                (self.dir / _name(self._segments.pop(0).number)).unlink(missing_ok=True)
            self.pending -= acked
            self.oldest_ms = self._peek_oldest() if self.pending else None

    def _peek_oldest(self) -> int | None:
        for seg in self._segments:
            start = self._cursor[1] if seg.number == self._cursor[0] else 0
            if seg.number < self._cursor[0]:
                continue
            first = bisect_left(seg.offsets, start)
            if first < seg.records:
                with open(self.dir / _name(seg.number), "rb") as f:
                    f.seek(seg.offsets[first])
                    _, _, written = HEADER.unpack(f.read(HEADER.size))
                return int(written)
        return None
