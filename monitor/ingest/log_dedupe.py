"""A logging filter that lets one record per message template through per window.

The Kafka client retries some commit errors forever on its own (``OffsetCommit failed ...
UnknownTopicOrPartitionError`` about ten times a second per partition). The ingest loop bounds
each commit in time and reports the failure once itself; this filter keeps the client's own
line to one per ``window_s`` per template and says how many it dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable


class RepeatFilter(logging.Filter):
    """Pass the first record of each ``msg`` template, then one per ``window_s``."""

    def __init__(self, clock: Callable[[], float], window_s: float = 60.0) -> None:
        super().__init__()
        self._clock = clock
        self._window = window_s
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)
        now = self._clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self._window:
            self._seen[key] = (last[0], last[1] + 1)
            return False
        dropped = last[1] if last is not None else 0
        self._seen[key] = (now, 0)
        if dropped:
            record.msg = f"{record.msg} ({dropped} identical lines suppressed)"
        return True


def dedupe_kafka_client_logs(clock: Callable[[], float], window_s: float = 60.0) -> None:
    """Install one :class:`RepeatFilter` on the Kafka client's group coordinator logger."""
    logger = logging.getLogger("aiokafka.consumer.group_coordinator")
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter(clock, window_s))
