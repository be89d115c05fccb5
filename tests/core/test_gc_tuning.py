"""The periodic full collection frees cyclic garbage that outlived a young collection (the
worker and the gate process run it: tests/gate/test_gate_server.py reads it on /metrics)."""

from __future__ import annotations

import asyncio
import gc

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

    with pytest.raises(asyncio.CancelledError):
        await collect_periodically(7.0, sleep)
    assert slept == [7.0, 7.0]
    assert not any(isinstance(o, Node) for o in gc.get_objects())
