"""Token-bucket request rates per key (a credential or a peer address), with an injected clock.

A bucket holds at most ``burst`` tokens and refills at ``per_s`` tokens a second; a request
takes one. :meth:`RateLimiter.take` answers 0.0 when the request is admitted, else the seconds
until a token is back (the ``Retry-After`` of a 429). At most ``max_keys`` buckets are kept:
the least recently used is forgotten first (it comes back full), so memory stays bounded
whatever keys a client invents.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Rate:
    """``per_s`` requests a second on average, ``burst`` at once; ``per_s`` 0 means unlimited."""

    per_s: float
    burst: float

    @property
    def unlimited(self) -> bool:
        return self.per_s <= 0


class RateLimiter:
    """Buckets of one :class:`Rate` keyed by any string; ``clock`` gives monotonic seconds."""

    def __init__(self, rate: Rate, clock: Callable[[], float], max_keys: int = 10_000) -> None:
        self.rate = rate
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def take(self, key: str) -> float:
        """0.0 and one token taken when ``key`` may make a request now, else the seconds to
        wait (nothing taken)."""
        if self.rate.unlimited:
            return 0.0
        now = self._clock()
        tokens, at = self._buckets.pop(key, (self.rate.burst, now))
        tokens = min(self.rate.burst, tokens + (now - at) * self.rate.per_s)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate.per_s
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)
        return wait

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after(wait_s: float) -> str:
    """The ``Retry-After`` header value (whole seconds, at least 1) for a wait."""
    return str(max(1, math.ceil(wait_s)))
