"""Whether the ingest loop is making progress: what ``GET /health`` answers (pure, no I/O).

Health contract (docs/robustness.md):

- ``starting`` (503) until the consumer is subscribed;
- ``stalled`` (503) when no batch was written for ``stall_after_s`` while there is work: the
  consumer lag is above zero or the partitions are paused (a store that keeps failing pauses
  them); an idle pipeline with no lag is healthy however long it has been quiet;
- ``commits_failing`` (503) after ``max_commit_failures`` offset commits in a row failed;
- ``ok`` (200) otherwise.

The gauge ``monitor_seconds_since_last_write`` reads :meth:`IngestHealth.seconds_since_write`
at scrape time: seconds since the last committed batch (since the loop started, before any).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class IngestHealth:
    """Progress bookkeeping of one ingest loop; ``clock`` is a monotonic time source."""

    clock: Callable[[], float]
    stall_after_s: float = 120.0
    max_commit_failures: int = 3
    ready: bool = False
    paused: bool = False
    lag: int = 0
    commit_failures: int = 0
    last_error: str = ""
    last_write: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.last_write = self.clock()

    def wrote(self) -> None:
        """A batch was written (the store is taking events)."""
        self.last_write = self.clock()

    def seconds_since_write(self) -> float:
        return max(0.0, self.clock() - self.last_write)

    def stalled_seconds(self) -> float:
        """Seconds without a write while there is work (lag or paused), else 0: the value of
        the ``ingest_stall_s`` alert metric."""
        return self.seconds_since_write() if self.lag > 0 or self.paused else 0.0

    def idle(self) -> None:
        """Nothing to do (no lag, not paused): quiet is not a stall."""
        if self.lag == 0 and not self.paused:
            self.last_write = self.clock()

    def status(self) -> tuple[bool, str, str]:
        """``(healthy, state, reason)`` as served by ``/health`` (see the module contract)."""
        if not self.ready:
            return False, "starting", "the ingest consumer is not subscribed yet"
        if self.commit_failures >= self.max_commit_failures:
            return (
                False,
                "commits_failing",
                (f"{self.commit_failures} offset commits in a row failed ({self.last_error})"),
            )
        since = self.seconds_since_write()
        if since > self.stall_after_s and (self.lag > 0 or self.paused):
            why = "partitions paused" if self.paused else f"consumer lag {self.lag}"
            error = f"; last error: {self.last_error}" if self.last_error else ""
            return False, "stalled", f"no batch written for {since:.0f} s with {why}{error}"
        return True, "ok", ""
