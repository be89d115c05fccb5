"""Garbage-collector settings of the long-running worker process.

CPython's cyclic collector pauses the whole process; with the default thresholds (700, 10, 10)
a worker that answers ``POST /v1/gate`` collects its youngest generation every few hundred
requests and its oldest every ~70,000 allocations net, walking every live object (the imported
modules, the app, the history cache): the pauses were the bulk of the gate's tail latency
(docs/benchmarks.md, "Runtime trust gate": open-loop p99 41.9 -> 15.7 ms at 500 req/s).

:func:`tune_gc` is called once, after the app is built and before it runs: it moves every
object alive then (imports, settings, the app) to the permanent generation (``gc.freeze``), so
no collection walks them again, and raises the thresholds so collections run less often. Cyclic
garbage is still collected, later; reference counting frees everything else at once, as before.
"""

from __future__ import annotations

import gc

#: (generation 0 allocations, generation 1 and generation 2 collection ratios)
THRESHOLDS = (100_000, 50, 1000)


def tune_gc() -> None:
    """Freeze what is alive now and set :data:`THRESHOLDS` (see the module docstring)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
