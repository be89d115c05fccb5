"""Retry and circuit-breaking policy for judge calls (pure: time and randomness are injected).

:class:`RetryPolicy` decides how long to wait before retry number *n* (exponential backoff with
full jitter, or the server's ``Retry-After``, both capped). :class:`CircuitBreaker` stops calling
an endpoint that keeps failing and probes it again after a cool-down. Neither sleeps nor reads a
clock itself: callers pass a ``random()`` source, the current wall time and a monotonic clock, so
every decision is a plain function of plain values and tests need no real waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait according to an HTTP ``Retry-After`` header value.

    Args:
        value: the header value: delta-seconds (``"7"``; a decimal like ``"1.5"`` is accepted too)
            or an HTTP-date (``"Wed, 21 Oct 2015 07:28:00 GMT"``); ``None`` when absent.
        now: the current aware wall-clock time, to turn an HTTP-date into a delay.

    Returns:
        The delay in seconds, never negative (a date in the past gives 0.0), or ``None`` when the
        header is absent or unparseable (the caller then falls back to its own backoff).
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if seconds == seconds and seconds != float("inf") else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; "-0000" parses naive
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a call gets and how long to wait between them.

    Attributes:
        max_attempts: total attempts including the first (>= 1); 1 means never retry.
        base_delay: seconds; the backoff ceiling before retry n is ``base_delay * 2**(n-1)``.
        max_delay: seconds; cap on the backoff ceiling.
        max_retry_after: seconds; cap on a server-requested ``Retry-After`` (a server asking for
            an hour should not park a worker for an hour; the call fails sooner instead).

    Raises ValueError on construction when a value is out of range.
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0 or self.max_retry_after < 0:
            raise ValueError("delays must be >= 0 seconds")

    def should_retry(self, attempt: int) -> bool:
        """Whether another attempt is allowed after ``attempt`` (1-based) attempts failed."""
        return attempt < self.max_attempts

    def backoff_ceiling(self, retry: int) -> float:
        """Upper bound in seconds of the jittered backoff before retry ``retry`` (1-based):
        ``min(max_delay, base_delay * 2**(retry-1))``."""
        if retry < 1:
            raise ValueError(f"retry numbers start at 1, got {retry}")
        return min(self.max_delay, self.base_delay * 2.0 ** min(retry - 1, 62))

    def delay(
        self, retry: int, rand: Callable[[], float], retry_after: float | None = None
    ) -> float:
        """Seconds to wait before retry ``retry`` (1-based).

        With ``retry_after`` (seconds, from :func:`parse_retry_after`) the server's delay is used
        as is, capped at ``max_retry_after``. Otherwise "full jitter":
        ``rand() * backoff_ceiling(retry)`` with ``rand`` returning a float in [0, 1), so the
        delay is uniform in [0, ceiling) and concurrent clients spread out instead of retrying
        in lockstep.
        """
        if retry_after is not None:
            return min(max(0.0, retry_after), self.max_retry_after)
        return rand() * self.backoff_ceiling(retry)


class CircuitBreaker:
    """A per-endpoint circuit breaker driven by an injected monotonic clock.

    States and transitions:

    - ``closed``: calls go through; ``failure_threshold`` consecutive failures open it (a success
      resets the count).
    - ``open``: :meth:`allow` returns False (callers fail fast) until ``cool_down`` seconds of
      the monotonic clock have passed since it opened; then it is ``half_open``.
    - ``half_open``: exactly one trial call is allowed at a time (further :meth:`allow` calls
      return False while it is in flight). Its success closes the breaker; its failure opens it
      again for another full cool-down.

    Protocol for callers: call :meth:`allow` before each call and skip the call when it is
    False; after an allowed call report exactly one of :meth:`record_success`,
    :meth:`record_failure` or :meth:`release` (the call ended in a way that says nothing about
    the endpoint's health, e.g. it was cancelled or rate limited). Not thread-safe; meant for one
    asyncio event loop, where these methods never interleave.
    """

    def __init__(
        self, monotonic: Callable[[], float], failure_threshold: int = 5, cool_down: float = 30.0
    ) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {failure_threshold}")
        if cool_down < 0:
            raise ValueError(f"cool_down must be >= 0 seconds, got {cool_down}")
        self._monotonic = monotonic
        self.failure_threshold = failure_threshold
        self.cool_down = cool_down
        self._state: BreakerState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._probe_in_flight = False

    @property
    def state(self) -> BreakerState:
        """The current state (an ``open`` breaker whose cool-down is over reads ``half_open``)."""
        if self._state == "open" and self._monotonic() - self._opened_at >= self.cool_down:
            self._state = "half_open"
            self._probe_in_flight = False
        return self._state

    def allow(self) -> bool:
        """Whether a call may go to the endpoint now. In ``half_open`` this claims the single
        trial slot, so the caller must then report the call's result."""
        state = self.state
        if state == "closed":
            return True
        if state == "open" or self._probe_in_flight:
            return False
        self._probe_in_flight = True
        return True

    def record_success(self) -> None:
        """The endpoint answered: close the breaker and reset the failure count."""
        self._state = "closed"
        self._failures = 0
        self._probe_in_flight = False

    def record_failure(self) -> None:
        """The endpoint failed (5xx, timeout, connection error): count it; open the breaker when
        the threshold is reached, or at once when this was the half-open trial call."""
        self._failures += 1
        self._probe_in_flight = False
        if self.state == "half_open" or self._failures >= self.failure_threshold:
            self._state = "open"
            self._opened_at = self._monotonic()

    def release(self) -> None:
        """The allowed call ended without telling anything about health: free the half-open
        trial slot (if it held it) and change nothing else."""
        self._probe_in_flight = False


class CircuitBreakers:
    """One :class:`CircuitBreaker` per endpoint key (e.g. a base URL), created on first use with
    the same settings, so every judge talking to one endpoint shares its breaker."""

    def __init__(
        self, monotonic: Callable[[], float], failure_threshold: int = 5, cool_down: float = 30.0
    ) -> None:
        self._monotonic = monotonic
        self._threshold = failure_threshold
        self._cool_down = cool_down
        self._breakers: dict[str, CircuitBreaker] = {}

    def for_endpoint(self, key: str) -> CircuitBreaker:
        """The breaker of ``key`` (created closed on first use)."""
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = CircuitBreaker(self._monotonic, self._threshold, self._cool_down)
            self._breakers[key] = breaker
        return breaker
