"""Decision events on their way to the bus: sent after the answer, buffered on disk when the
broker does not acknowledge them (pure: the producer and the disk buffer are injected).

The gate answers first; :meth:`DecisionOutbox.publish` then hands the decision event to the
broker. Two modes:

- **direct** (the disk buffer is empty): the event is sent and its acknowledgement awaited; no
  disk write. If it fails, or is not acknowledged within ``spill_after_s``, every event still
  in flight is written to the disk buffer, in publication order, and the outbox turns to
- **buffered**: while the disk buffer holds anything, each new event is appended behind it
  (written and fsynced before ``publish`` returns: that is when it counts as *kept*), so the
  order of publication is the order of delivery. :meth:`run` replays the buffer, oldest first,
  in batches, and acknowledges a record on disk only after the broker acknowledged it; once the
  buffer is empty the outbox is direct again.

What can be lost (docs/gate.md, "Outages"): a killed process loses the events answered in the
last ``spill_after_s`` whose send was not yet acknowledged (nothing is on disk for them yet);
a graceful stop (:meth:`close`) first writes the events in flight to disk, then delivers the
buffer for up to :data:`STOP_DRAIN_S` (what is left waits for a process to take the slot). An
event on disk is lost only to the size cap (counted, ``dropped["full"]``), a corrupt record
(``dropped["corrupt"]``), a disk that refuses the write (``dropped["write_error"]``), or a
broker that refuses the record for good (:class:`Refused`, ``dropped["refused"]``). An
event can be delivered twice (a late acknowledgement after it was spilled, a crash between a
delivery and its ``ack``); the store keeps each ``event_id`` once.

With ``evaluations`` (a :class:`Tee`, ``monitor.otel.evaluation_export.EvaluationQueue``),
every published event is also handed to it without waiting (exported as an OpenTelemetry
evaluation, docs/otel.md), whatever the broker does; :meth:`close` closes it, :meth:`status`
reports its counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from monitor.contract.events import AgentEvent
from monitor.core.errors import Refused

log = logging.getLogger("monitor.gate.decision_outbox")
Deliver = Callable[[bytes, bytes], Awaitable[None]]  # (key, value): returns once acknowledged

#: Seconds a graceful stop spends delivering the disk buffer (a broker merely slow to
#: acknowledge, as under load, would otherwise leave a stopped process's decisions on disk)
STOP_DRAIN_S = 5.0


@dataclass(frozen=True)
class BufferedRecord:
    """One buffered decision event as :meth:`Buffer.read` returns it: its Kafka key and value,
    when it was buffered, and where the next record starts (``end``: segment number, byte
    offset) for :meth:`Buffer.ack`."""

    key: bytes
    value: bytes
    written_ms: int
    end: tuple[int, int]


class Tee(Protocol):
    """Where published events also go (the gate's evaluation export): ``add`` never waits."""

    counts: dict[str, int]

    def add(self, event: AgentEvent) -> None: ...
    async def aclose(self) -> None: ...


class Buffer(Protocol):
    """What the outbox needs of the disk buffer (:class:`monitor.gate.buffer.DiskBuffer`)."""

    pending: int
    oldest_ms: int | None
    dropped: dict[str, int]

    def append(self, items: Sequence[tuple[bytes, bytes]]) -> None: ...
    def read(self, limit: int) -> Sequence[BufferedRecord]: ...
    def ack(self, end: tuple[int, int]) -> None: ...


def _swallow(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a late failure of a spilled send is not an error


class DecisionOutbox:
    """Publishes decision events through ``deliver``; buffers on ``buffer`` what it cannot."""

    def __init__(
        self,
        deliver: Deliver,
        buffer: Buffer,
        *,
        spill_after_s: float = 2.0,
        replay_batch: int = 500,
        retry_s: float = 1.0,
        evaluations: Tee | None = None,
    ) -> None:
        self.deliver = deliver
        self.buffer = buffer
        self.evaluations = evaluations
        self.spill_after_s = spill_after_s
        self.replay_batch = replay_batch
        self.retry_s = retry_s
        self.last_error: str | None = None
        self.delivered = 0  # acknowledged by the broker (direct and replayed)
        self.replayed = 0
        self._seq = 0
        self._inflight: dict[int, tuple[bytes, bytes]] = {}
        self._queue: list[tuple[bytes, bytes]] = []
        self._queued_waiters: list[asyncio.Future[None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._in_write = 0  # taken from the queue, being written
        self._wake = asyncio.Event()
        self._spilled: asyncio.Future[None] | None = None  # set when the in-flight are spilled
        self._closing = False

    @property
    def buffered_mode(self) -> bool:
        """True while anything is on disk or on its way there: new events go behind it."""
        return bool(self.buffer.pending or self._queue or self._writer_busy)

    @property
    def _writer_busy(self) -> bool:
        return self._writer is not None and not self._writer.done()

    async def publish(self, event: AgentEvent) -> bool:
        """Deliver ``event``; True once the broker acknowledged it, False when it was buffered
        (or dropped: see ``buffer.dropped``). Never raises for the broker or the disk."""
        item = (event.conversation_id.encode("utf-8"), event.to_json())
        if self.evaluations is not None:
            self.evaluations.add(event)
        if self._closing or self.buffered_mode:
            await self._write([item])
            return False
        self._seq += 1
        seq = self._seq
        self._inflight[seq] = item
        task = asyncio.ensure_future(self.deliver(*item))
        task.add_done_callback(_swallow)
        if self._spilled is None or self._spilled.done():
            self._spilled = asyncio.get_running_loop().create_future()
        await asyncio.wait(
            (task, self._spilled), timeout=self.spill_after_s, return_when=asyncio.FIRST_COMPLETED
        )
        if seq not in self._inflight:
            return False  # written to disk by another event's failure (maybe sent twice)
        if not task.done():
            self._note(TimeoutError(f"no acknowledgement in {self.spill_after_s} s"))
        elif isinstance(exc := task.exception(), Refused):
            del self._inflight[seq]
            self._drop_refused(exc)
            return False
        elif exc is not None:
            self._note(exc)
        else:
            del self._inflight[seq]
            self.delivered += 1
            return True
        await self._spill_inflight()
        return False

    async def _spill_inflight(self) -> None:
        items = [self._inflight[s] for s in sorted(self._inflight)]
        self._inflight.clear()
        if self._spilled is not None and not self._spilled.done():
            self._spilled.set_result(None)  # wakes the publishers of the spilled events
        log.warning(
            "gate: %d decision events not acknowledged, buffered on disk (%s)",
            len(items),
            self.last_error,
        )
        await self._write(items)

    def _drop_refused(self, exc: Refused) -> None:
        self._note(exc)
        self.buffer.dropped["refused"] = self.buffer.dropped.get("refused", 0) + 1
        log.error("gate: a decision event refused by the broker for good, dropped: %s", exc)

    def _note(self, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]

    async def _write(self, items: list[tuple[bytes, bytes]]) -> None:
        """Queue ``items`` for the disk and wait until they are fsynced (group commit: one
        write and one fsync for everything queued meanwhile)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.extend(items)
        self._queued_waiters.append(waiter)
        if not self._writer_busy:
            self._writer = asyncio.ensure_future(self._drain())
        await asyncio.shield(waiter)

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            waiters, self._queued_waiters = self._queued_waiters, []
            self._in_write = len(batch)
            try:
                await asyncio.to_thread(self.buffer.append, batch)
            except Exception as exc:
                self.buffer.dropped["write_error"] = self.buffer.dropped.get(
                    "write_error", 0
                ) + len(batch)
                log.error(
                    "gate: %d decision events could not be buffered on disk, dropped: %s",
                    len(batch),
                    exc,
                )
            self._in_write = 0
            for w in waiters:
                if not w.done():
                    w.set_result(None)
            self._wake.set()

    async def replay_once(self) -> int:
        """Send the oldest buffered batch; acknowledge on disk the longest prefix the broker
        acknowledged (or refused for good: dropped). Returns how many records left the buffer."""
        records = await asyncio.to_thread(self.buffer.read, self.replay_batch)
        if not records:
            return 0
        results = await asyncio.gather(
            *(self.deliver(r.key, r.value) for r in records), return_exceptions=True
        )
        done = sent = 0
        for result in results:
            if isinstance(result, Refused):
                self._drop_refused(result)
            elif isinstance(result, BaseException):
                self._note(result)
                break
            else:
                sent += 1
            done += 1
        if done:
            await asyncio.to_thread(self.buffer.ack, records[done - 1].end)
            self.delivered += sent
            self.replayed += sent
        return done

    async def run(self) -> None:
        """Replay the disk buffer for as long as the gate process runs: at start, and whenever it
        holds records (a failed attempt is retried after ``retry_s``; each attempt itself
        waits up to the producer's request timeout for the broker)."""
        while not self._closing:
            if not self.buffer.pending:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.retry_s)
                continue
            try:
                sent = await self.replay_once()
            except Exception as exc:  # the disk: keep trying, say so
                self._note(exc)
                log.error("gate: replaying buffered decision events failed: %s", exc)
                sent = 0
            if sent:
                log.info(
                    "gate: %d buffered decision events delivered, %d still buffered",
                    sent,
                    self.buffer.pending,
                )
            else:
                await asyncio.sleep(self.retry_s)

    async def close(self, drain_s: float = 0.0) -> None:
        """Stop replaying; write the events still in flight to disk (a graceful stop loses
        nothing that was answered), then, for up to ``drain_s`` seconds, deliver what the disk
        buffer holds: a slot is replayed only when a gate process takes it again, which after
        a scale-down may be never (call it before the producer closes)."""
        self._closing = True
        self._wake.set()
        if self._inflight:
            await self._spill_inflight()
        while self._writer_busy:
            assert self._writer is not None
            await self._writer
        if drain_s > 0 and self.buffer.pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._replay_all(), drain_s)
            if self.buffer.pending:
                log.warning(
                    "gate: %d decision events stay buffered on disk, replayed when a gate "
                    "process takes this slot again",
                    self.buffer.pending,
                )
        if self.evaluations is not None:
            await self.evaluations.aclose()

    async def _replay_all(self) -> None:
        """Replay until the buffer is empty or a round delivers nothing."""
        while self.buffer.pending:
            try:
                if not await self.replay_once():
                    return
            except Exception as exc:  # the disk: what is left stays there
                self._note(exc)
                return

    def status(self, now_ms: int | None = None) -> dict[str, Any]:
        """``buffered`` (on disk, fsynced, not yet acknowledged), ``writing`` (on their way to
        the disk), the oldest buffered record's age, drops by reason, ``in_flight`` (sent
        directly, not yet acknowledged: what a killed process would lose); with an evaluation
        export, ``evaluations``: the events exported by result."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        oldest = self.buffer.oldest_ms
        out: dict[str, Any] = {
            "buffered": self.buffer.pending,
            "writing": len(self._queue) + self._in_write,
            "oldest_age_s": round(max(0, now_ms - oldest) / 1000.0, 3) if oldest else None,
            "dropped": sum(self.buffer.dropped.values()),
            "dropped_by_reason": dict(self.buffer.dropped),
            "in_flight": len(self._inflight),
            "last_error": self.last_error,
        }
        if self.evaluations is not None:  # exported as OpenTelemetry evaluations, by result
            out["evaluations"] = dict(self.evaluations.counts)
        return out
