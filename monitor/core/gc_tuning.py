"""Garbage-collector settings of the long-running worker and gate processes.

CPython's cyclic collector pauses the whole process; with the default thresholds (700, 10, 10)
a worker that answers ``POST /v1/gate`` collects its youngest generation every few hundred
requests and its oldest every ~70,000 allocations net, walking every live object (the imported
modules, the app, the history cache): the pauses were the bulk of the gate's tail latency
(docs/benchmarks.md, "Runtime trust gate": open-loop p99 41.9 -> 15.7 ms at 500 req/s).

:func:`tune_gc` is called once, after the app is built and before it runs: it moves every
object alive then (imports, settings, the app) to the permanent generation (``gc.freeze``), so
no collection walks them again, and raises the thresholds so collections run less often.

The oldest generation must still be collected: SQLAlchemy builds every statement as a graph
with reference cycles (an expression, its type's comparator, its bind parameters), and asyncpg's
statement cache entries and their timers form cycles too, so a process that runs queries leaves
a steady stream of cyclic garbage that reference counting never frees. Whatever of it is still
in flight when a younger generation is collected moves to the oldest one, and only a full
collection frees it: with an oldest-generation threshold that is never reached the worker grew
by ~84 MiB an hour under the soak's load (about 4,000 such objects a minute). A full collection
is considered after every second collection of the middle generation (about every 10 million
allocations net, minutes apart under load) and, as CPython always does, runs only once the
objects promoted since the last one exceed a quarter of those that survived it: its pause is
bounded by the live objects outside the frozen set, and the garbage waiting for it by what a
few minutes produce.
"""

from __future__ import annotations

import gc

#: (generation 0 allocations, generation 1 and generation 2 collection ratios)
THRESHOLDS = (100_000, 50, 1)


def tune_gc() -> None:
    """Freeze what is alive now and set :data:`THRESHOLDS` (see the module docstring)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
