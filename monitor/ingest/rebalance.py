"""What the ingest loop does when the group rebalances: a revocation waits for the batches in
flight (their writes and offset commits finish before the partitions move), an assignment is
logged.

:class:`InFlight` counts the batches being written. While a revocation waits for them, no new
batch starts its write: it starts after the revocation, with the partitions its consumer still
owns (:meth:`monitor.ingest.decoded.Decoded.keep`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from aiokafka import TopicPartition
from aiokafka.abc import ConsumerRebalanceListener

log = logging.getLogger("monitor.ingest")


class InFlight:
    """The batches being written and committed, and the revocations waiting for them."""

    def __init__(self) -> None:
        self._changed = asyncio.Condition()
        self._batches = 0
        self._revoking = 0

    @property
    def batches(self) -> int:
        return self._batches

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[None]:
        """Hold one batch in flight for the block; waits first while a revocation is waiting."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._revoking == 0)
            self._batches += 1
        try:
            yield
        finally:
            async with self._changed:
                self._batches -= 1
                self._changed.notify_all()

    async def drain(self) -> None:
        """Return once no batch is in flight; batches not yet started wait until then."""
        async with self._changed:
            self._revoking += 1
            try:
                await self._changed.wait_for(lambda: self._batches == 0)
            finally:
                self._revoking -= 1
                self._changed.notify_all()


class WaitForBatch(ConsumerRebalanceListener):  # type: ignore[misc]
    """Waits for the batches in flight on a revocation, then calls ``forget`` (if any) with
    the revoked partitions."""

    def __init__(
        self, in_flight: InFlight, forget: Callable[[set[TopicPartition]], None] | None = None
    ) -> None:
        self._in_flight = in_flight
        self._forget = forget

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._in_flight.drain()  # the batches in flight commit before partitions move
        if self._forget is not None:
            self._forget(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        log.info("assigned partitions: %s", sorted(tp.partition for tp in assigned))
