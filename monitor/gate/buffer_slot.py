"""Which disk buffer a gate process opens (I/O edge: the file system).

The worker's gate and ``monitor gate serve`` both call :func:`open_gate_buffer`; processes
sharing a state directory each take a slot of their own, and a restarted process takes over
(and replays) a slot that a dead predecessor left.
"""

from __future__ import annotations

from pathlib import Path

from monitor.config import Settings
from monitor.core.errors import BufferInUse
from monitor.gate.buffer import DiskBuffer


def open_gate_buffer(settings: Settings, slots: int = 64) -> DiskBuffer:
    """The gate's disk buffer: ``gate_buffer_dir`` when set (a second process on it stops with
    BufferInUse); else the first free slot of ``<state_dir>/gate-buffer``, ``gate-buffer-1``,
    ... so that processes sharing a state directory each get one."""
    cap = settings.gate_buffer_max_bytes
    if settings.gate_buffer_dir is not None:
        return DiskBuffer(settings.gate_buffer_dir, max_bytes=cap)
    base = settings.state_dir / "gate-buffer"
    for slot in range(slots):
        try:
            return DiskBuffer(base if slot == 0 else Path(f"{base}-{slot}"), max_bytes=cap)
        except BufferInUse:
            continue
    raise BufferInUse(f"{base}: all {slots} buffer slots are in use by other processes")
