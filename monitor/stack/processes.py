"""Process and port helpers for the stack of ``monitor up`` (Linux /proc based).

``proc_state`` reads a process's state and command line; ``terminate`` stops a pid with a
grace period; ``die_with_parent`` is a ``preexec_fn`` that ties a child's life to its parent;
``pick_port`` prefers a well-known port and falls back to a free one; ``tail`` reads the end
of a log; ``StartStop`` makes a process with ``start`` and ``stop`` a context manager.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from monitor.stack.ports import free_port

S = TypeVar("S", bound="StartStop")


class StartStop(ABC):
    """A context manager over ``start()`` (on enter, returning the object) and ``stop()``."""

    @abstractmethod
    def start(self: S) -> S:
        """Start the process; returns the object once it is ready."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the process."""

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def pick_port(preferred: int) -> int:
    """``preferred`` if it can be bound on 127.0.0.1 now, else a free port (0: a free port)."""
    if preferred:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # as servers bind: connections in TIME_WAIT from a previous run do not count
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    return free_port()


def proc_state(pid: int) -> tuple[str, str] | None:
    """``(state letter, cmdline)`` of a live or zombie process, ``None`` if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except (OSError, ValueError):
        return None
    return stat.rpartition(")")[2].split()[0], cmd.decode("utf-8", "replace")


def terminate(pid: int, sig: signal.Signals, wait_s: float) -> None:
    """Send ``sig`` to ``pid``, wait up to ``wait_s`` for it to go, then SIGKILL it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while (st := proc_state(pid)) is not None and st[0] != "Z":
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 5
            time.sleep(0.1)


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGTERM this child when ``monitor up`` dies, even by SIGKILL."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def tail(path: Path, lines: int = 30, offset: int = 0) -> str:
    """The last ``lines`` lines of a text file after byte ``offset`` ('' if unreadable)."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
