"""Decision events on their way to the bus: published after the answer, kept when it fails (pure).

The gate answers first and publishes its decision event afterwards (the agent never waits for
the broker). :class:`DecisionOutbox` sends each event through an injected ``send`` (the worker's
producer); an event whose send fails is kept, in order, and re-sent by :meth:`retry` (the worker
calls it every ``gate_refresh_s``), so a broker outage delays decision events instead of losing
them. The buffer is in memory and bounded (``capacity``): beyond it the oldest kept event is
dropped and counted in ``dropped``; a worker that dies loses what it holds. Stored events are
deduplicated by ``event_id``, so an event sent twice (a send that failed after reaching the
broker) is stored once.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable

from monitor.contract.events import AgentEvent

log = logging.getLogger("monitor.gate.outbox")
Send = Callable[[AgentEvent], Awaitable[None]]


class DecisionOutbox:
    """Publishes decision events through ``send``; keeps and retries the ones that failed."""

    def __init__(self, send: Send, capacity: int = 100_000) -> None:
        self.send = send
        self.kept: deque[AgentEvent] = deque()
        self.capacity = capacity
        self.dropped = 0
        self.last_error: str | None = None
        self._retrying = False

    def _keep(self, event: AgentEvent, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]
        if len(self.kept) >= self.capacity:
            self.kept.popleft()
            self.dropped += 1
        self.kept.append(event)

    async def publish(self, event: AgentEvent) -> bool:
        """Send ``event`` now; False when it was kept (its send failed, or earlier events are
        kept: it goes behind them and a retry is started)."""
        if self.kept:  # keep the order: behind the kept ones
            self._keep_quietly(event)
            await self.retry()
            return False
        try:
            await self.send(event)
        except Exception as exc:
            self._keep(event, exc)
            log.warning("gate decision %s kept for a later send: %s", event.event_id, exc)
            return False
        return True

    def _keep_quietly(self, event: AgentEvent) -> None:
        if len(self.kept) >= self.capacity:
            self.kept.popleft()
            self.dropped += 1
        self.kept.append(event)

    async def retry(self) -> int:
        """Re-send the kept events in order until one fails; returns how many were sent (0 when
        another retry is already under way: one at a time keeps the order)."""
        if self._retrying:
            return 0
        self._retrying = True
        sent = 0
        try:
            while self.kept:
                event = self.kept[0]
                try:
                    await self.send(event)
                except Exception as exc:
                    self.last_error = f"{type(exc).__name__}: {exc}"[:300]
                    break
                self.kept.popleft()
                sent += 1
        finally:
            self._retrying = False
        if sent:
            log.info("gate: %d kept decision events sent, %d still kept", sent, len(self.kept))
        return sent
