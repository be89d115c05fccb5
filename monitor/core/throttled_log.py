"""A traceback per kind of failure per window, not per request.

A failure that a request can cause (a body the parser trips over, a decision that raises) is
logged with its traceback the first time and then at most once per ``window_s`` seconds per
exception type; the failures held back in between are counted and reported by the next line.
A client that repeats the request cannot fill the log. The records still pass through the
process's redaction filter (:mod:`monitor.core.log_redaction`) like every other record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from monitor.core.http_refusals import RefusalLog


class ThrottledExceptionLog:
    """``exception(msg, exc)`` logs at ERROR with ``exc``'s traceback when one is due for
    ``type(exc)``; otherwise it only counts. Not thread-safe: one per event loop."""

    def __init__(
        self,
        logger: logging.Logger,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._due = RefusalLog(window_s)
        self._clock = clock

    def exception(self, msg: str, exc: BaseException) -> bool:
        """Log ``msg`` with ``exc`` if a line is due; True when a line was written."""
        held = self._due.due(type(exc).__name__, self._clock())
        if held is None:
            return False
        suffix = f" ({held} more like it since the last line)" if held else ""
        self._logger.error("%s%s", msg, suffix, exc_info=exc)
        return True
