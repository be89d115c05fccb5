"""The worker's collector settings still free cyclic garbage that outlives a young collection.

Run in a subprocess: :func:`monitor.core.gc_tuning.tune_gc` freezes every object alive and
changes the process's thresholds, which must not leak into the test process. The generations'
ratios are the worker's; the youngest generation's threshold is divided by 100 so that the
hundreds of young collections a full one waits for take a second, not a minute."""

from __future__ import annotations

import json
import subprocess
import sys

# Makes cycles the way SQLAlchemy statements do (objects referring to each other) and keeps
# the last thousand alive, as queries in flight are, so every young collection finds some of
# them reachable and promotes them: only a full collection can free those.
PROGRAM = """
import collections, gc, json, sys
from monitor.core.gc_tuning import THRESHOLDS, tune_gc

tune_gc()
ratios = json.loads(sys.argv[1]) or THRESHOLDS[1:]
gc.set_threshold(THRESHOLDS[0] // 100, *ratios)

class Node:
    def __init__(self):
        self.other = Other(self)

class Other:
    def __init__(self, node):
        self.node = node
        self.payload = [node, {"k": node}]

in_flight = collections.deque(maxlen=1000)
before = gc.get_stats()[2]["collections"]
for _ in range(600_000):  # ~2.4 million container allocations: ~2,400 young collections
    in_flight.append(Node())
in_flight.clear()
print(json.dumps({
    "full_collections": gc.get_stats()[2]["collections"] - before,
    "tracked": len(gc.get_objects()),
}))
"""


def run(ratios: list[int]) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(ratios)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    result: dict[str, int] = json.loads(out.stdout)
    return result


def test_promoted_cyclic_garbage_is_collected_under_the_tuned_thresholds() -> None:
    tuned = run([])
    assert tuned["full_collections"] >= 1
    # what is left is the garbage of the last few minutes' worth at most, not all of it
    never = run([50, 1000])  # the oldest generation's threshold never reached
    assert never["full_collections"] == 0
    assert tuned["tracked"] * 4 < never["tracked"], (tuned, never)
