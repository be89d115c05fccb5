"""The judge latency histogram of ``verdict_minutes`` and the percentiles read from it, pure.

Bucket 0 holds latencies up to 1 ms; bucket ``b`` >= 1 holds (2^((b-1)/8), 2^(b/8)] ms, each
about 9 % wide (migration 0039 computes the bucket in SQL the same way). A percentile read from
the histogram is the upper edge of the bucket holding the nearest-rank percentile (the
``ceil(q * n)``-th smallest latency): never below it, at most :data:`MAX_RATIO` above it, or
1 ms when it is under 1 ms. The judges dashboard's "Judge latency" panel computes exactly this.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction

#: buckets per doubling of the latency above 1 ms
PER_DOUBLING = 8
#: the widest ratio of a bucket's upper to lower edge: the bound of a percentile's error
MAX_RATIO = 2 ** (1 / PER_DOUBLING)


def bucket(latency_ms: float) -> int:
    """The bucket of ``latency_ms`` (module docstring)."""
    if latency_ms <= 1:
        return 0
    return min(math.ceil(PER_DOUBLING * math.log(latency_ms) / math.log(2)), 32767)


def upper_edge(b: int) -> float:
    """The upper edge (ms) of bucket ``b``: 1 for bucket 0."""
    return 1.0 if b == 0 else float(2.0 ** (b / float(PER_DOUBLING)))


def histogram(latencies: Iterable[float]) -> dict[int, int]:
    """Count per bucket of ``latencies``."""
    out: dict[int, int] = {}
    for x in latencies:
        b = bucket(x)
        out[b] = out.get(b, 0) + 1
    return out


def percentile(counts: Mapping[int, int], q: float) -> float | None:
    """The upper edge of the bucket that holds the nearest-rank ``q`` percentile (``0 < q <=
    1``, taken as the decimal it prints as) of the histogram ``counts``; None when empty."""
    n = sum(counts.values())
    if n <= 0:
        return None
    rank = math.ceil(Fraction(str(q)) * n)
    below = 0
    for b in sorted(counts):
        below += counts[b]
        if below >= rank:
            return upper_edge(b)
    raise AssertionError("unreachable: the ranks add up to n")
