"""The gate's disk buffer on a real directory: order, acknowledgement, restart, torn writes,
the size cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.core.errors import BufferInUse
from monitor.gate.buffer import DiskBuffer


def items(lo: int, hi: int) -> list[tuple[bytes, bytes]]:
    return [(f"c{i}".encode(), f'{{"event_id":"gate:{i}"}}'.encode()) for i in range(lo, hi)]


def values(buf: DiskBuffer, limit: int = 10_000) -> list[bytes]:
    return [r.value for r in buf.read(limit)]


def test_append_read_ack_in_order_and_segments_are_deleted(tmp_path: Path) -> None:
    buf = DiskBuffer(tmp_path, max_bytes=1024 * 1024, segment_bytes=200)
    for lo in range(0, 30, 3):  # many small appends: several segments
        buf.append(items(lo, lo + 3))
    assert buf.pending == 30 and buf.oldest_ms is not None
    assert len(list(tmp_path.glob("seg-*.log"))) > 3
    first = buf.read(12)
    assert [r.key for r in first] == [f"c{i}".encode() for i in range(12)]
    assert buf.read(12) == first  # reading removes nothing
    buf.ack(first[-1].end)
    assert buf.pending == 18
    assert values(buf) == [v for _, v in items(12, 30)]
    rest = buf.read(100)
    buf.ack(rest[-1].end)
    assert buf.pending == 0 and buf.oldest_ms is None and buf.read(10) == []
    assert len(list(tmp_path.glob("seg-*.log"))) <= 1  # acknowledged segments are gone
    buf.ack(first[-1].end)  # an old acknowledgement is a no-op
    assert buf.pending == 0


def test_reopen_replays_only_unacknowledged_records(tmp_path: Path) -> None:
    buf = DiskBuffer(tmp_path, segment_bytes=150)
    buf.append(items(0, 10))
    buf.ack(buf.read(4)[-1].end)
    buf.close()
    again = DiskBuffer(tmp_path, segment_bytes=150)  # a restart (the old object is abandoned)
    assert again.pending == 6
    assert values(again) == [v for _, v in items(4, 10)]
    again.append(items(10, 12))  # new records go behind the old ones
    assert values(again) == [v for _, v in items(4, 12)]
    again.close()
    third = DiskBuffer(tmp_path, segment_bytes=150)
    assert values(third) == [v for _, v in items(4, 12)] and third.pending == 8


def test_a_torn_tail_is_skipped_counted_and_never_written_over(tmp_path: Path) -> None:
    buf = DiskBuffer(tmp_path)
    buf.append(items(0, 3))
    (seg,) = [p for p in tmp_path.glob("seg-*.log") if p.stat().st_size]
    with open(seg, "ab") as f:  # a crash in the middle of a write: half a header and payload
        f.write(b"\x00\x00\x00\x40\x12\x34")
    buf.close()
    again = DiskBuffer(tmp_path)
    assert again.pending == 3 and again.dropped["corrupt"] == 1
    again.append(items(3, 5))
    assert values(again) == [v for _, v in items(0, 5)]
    flipped = bytearray(seg.read_bytes())
    flipped[20] ^= 0xFF  # the first record's payload no longer matches its CRC
    seg.write_bytes(bytes(flipped))
    again.close()
    third = DiskBuffer(tmp_path)
    assert values(third) == [v for _, v in items(3, 5)]  # the damaged segment's rest is skipped
    assert third.dropped["corrupt"] == 1


def test_size_cap_drops_the_oldest_segments_and_counts_them(tmp_path: Path) -> None:
    buf = DiskBuffer(tmp_path, max_bytes=2000, segment_bytes=500)
    for lo in range(0, 100, 5):
        buf.append(items(lo, lo + 5))
    assert buf.bytes <= 2000
    kept = values(buf)
    assert buf.dropped["full"] + len(kept) == 100 and buf.dropped["full"] > 0
    assert buf.pending == len(kept)
    assert kept == [v for _, v in items(100 - len(kept), 100)]  # the newest are kept, in order
    buf.close()
    again = DiskBuffer(tmp_path, max_bytes=2000, segment_bytes=500)
    assert values(again) == kept


def test_one_process_per_directory(tmp_path: Path) -> None:
    buf = DiskBuffer(tmp_path)
    with pytest.raises(BufferInUse, match="in use by another process"):
        DiskBuffer(tmp_path)
    buf.close()
    DiskBuffer(tmp_path).close()  # free again once closed (a killed process frees it too)


def test_workers_sharing_a_state_dir_take_free_slots(tmp_path):
    from monitor.config import Settings
    from monitor.gate.buffer_slot import open_gate_buffer

    settings = Settings(state_dir=tmp_path)
    first, second = open_gate_buffer(settings), open_gate_buffer(settings)
    assert (first.dir, second.dir) == (tmp_path / "gate-buffer", tmp_path / "gate-buffer-1")
    first.close()  # a dead worker's slot is taken over by the next one
    third = open_gate_buffer(settings)
    assert third.dir == tmp_path / "gate-buffer"
    explicit = Settings(state_dir=tmp_path, gate_buffer_dir=tmp_path / "gate-buffer-1")
    with pytest.raises(BufferInUse):  # an explicit directory is never silently replaced
        open_gate_buffer(explicit)
    second.close()
    third.close()
