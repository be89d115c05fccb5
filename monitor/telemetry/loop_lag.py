"""How long the event loop is held: a probe that sleeps a short interval and records how late
it wakes up (pure core; the clock, the sleep and the metric sink are injected).

Everything the worker serves (HTTP ingest, the gate, /health, /metrics, the Kafka consumers)
shares one event loop: while one callback runs, every other waits. A wake-up ``lag`` seconds
late means some callback held the loop for about that long. :class:`LoopLag` keeps the longest
lag of the last ``window_s`` seconds (the ``monitor_event_loop_stall_seconds`` gauge), the
longest since it started, and hands each lag to ``observe`` (the lag histogram).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

#: how often the worker's probe wakes up
INTERVAL_S = 0.05
#: the window of the "longest recent stall" gauge
WINDOW_S = 60.0


class LoopLag:
    """The event loop's stalls as seen by a periodic wake-up (see the module docstring)."""

    def __init__(
        self,
        clock: Callable[[], float],
        interval_s: float = INTERVAL_S,
        window_s: float = WINDOW_S,
        observe: Callable[[float], None] | None = None,
    ) -> None:
        if interval_s <= 0 or window_s <= 0:
            raise ValueError("interval_s and window_s must be positive")
        self.clock, self.interval_s, self.window_s = clock, interval_s, window_s
        self.observe = observe
        self.longest = 0.0  # since the probe started
        self.samples = 0
        self._recent: deque[tuple[float, float]] = deque()  # (when, lag), lags decreasing

    def record(self, expected: float, woke: float) -> float:
        """Record a wake-up at ``woke`` that was due at ``expected``; returns its lag (>= 0)."""
        lag = max(0.0, woke - expected)
        self.samples += 1
        self.longest = max(self.longest, lag)
        while self._recent and self._recent[-1][1] <= lag:
            self._recent.pop()  # a smaller, older lag can never be the window's max again
        self._recent.append((woke, lag))
        if self.observe is not None:
            self.observe(lag)
        return lag

    def recent_max(self, now: float | None = None) -> float:
        """The longest lag recorded in the last ``window_s`` seconds (0 when none)."""
        now = self.clock() if now is None else now
        while self._recent and self._recent[0][0] < now - self.window_s:
            self._recent.popleft()
        return self._recent[0][1] if self._recent else 0.0

    async def run(
        self,
        stopping: asyncio.Event,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """Wake up every ``interval_s`` and record the lag until ``stopping`` is set."""
        while not stopping.is_set():
            expected = self.clock() + self.interval_s
            await sleep(self.interval_s)
            self.record(expected, self.clock())
