"""The periodic full collection frees cyclic garbage that outlived a young collection, and then
returns free pages to the system (the worker and the gate process run it:
tests/gate/test_gate_server.py reads the collections on /metrics)."""

from __future__ import annotations

import asyncio
import gc
import platform
import subprocess
import sys

import pytest

from monitor.core.gc_tuning import collect_periodically


class Node:
    def __init__(self) -> None:
        self.me = self


async def test_a_periodic_collection_frees_promoted_garbage() -> None:
    nodes = [Node() for _ in range(1000)]
    gc.collect(1)  # alive now: promoted to the oldest generation
    assert sum(isinstance(o, Node) for o in gc.get_objects(2)) >= 1000
    del nodes  # garbage now, and only a full collection finds it
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) > 1:
            raise asyncio.CancelledError

    released: list[int] = []
    with pytest.raises(asyncio.CancelledError):
        await collect_periodically(7.0, sleep, lambda: released.append(len(slept)))
    assert slept == [7.0, 7.0]
    assert released == [1]  # after the first collection; the second sleep was cancelled
    assert not any(isinstance(o, Node) for o in gc.get_objects())


# a heap fragmented by a burst: 4 of 5 blocks freed, each between blocks still alive
_FRAGMENTED = """
import random
from monitor.core.gc_tuning import release_free_memory

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

random.seed(1)
kept, freed = [], []
for i in range(120_000):
    (kept if i % 5 == 0 else freed).append(bytearray(random.choice((600, 1200, 3000))))
freed.clear()
before = rss_mib()
released = release_free_memory()
print(released, before, rss_mib())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_free_pages_between_live_blocks_are_returned_to_the_system() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _FRAGMENTED], capture_output=True, text=True, check=True
    ).stdout.split()
    released, before, after = out[0] == "True", float(out[1]), float(out[2])
    assert released
    assert before - after > 25, f"RSS {before:.0f} -> {after:.0f} MiB"
