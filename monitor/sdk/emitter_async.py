"""The asyncio emitter over aiokafka (import it from ``monitor.sdk``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, TypedDict, Unpack

from aiokafka import AIOKafkaProducer

from monitor.contract.events import MAX_EVENT_BYTES, Agent, AgentEvent, Context
from monitor.core.errors import (
    BufferFull,
    DeliveryError,
    EmitterError,
    EmitterNotRunning,
    InvalidEvent,
    describe,
)
from monitor.sdk.base import EventHelpers
from monitor.sdk.batches import Batches
from monitor.sdk.gate_client import GateAnswer, GateClient, GateOptions, body_for

_IDEMPOTENCE_HINT = (
    " (idempotent=True needs a broker that answers InitProducerId; the embedded Tansu broker"
    " with memory storage does not, so pass idempotent=False against it)"
)


class EmitterOptions(TypedDict, total=False):
    """The keywords of :class:`EventEmitter` beside the broker, the topic and the helpers'
    defaults (``agent``, ``context``, ``clock``); see ``EventEmitter.__init__``."""

    idempotent: bool
    linger_ms: int
    max_batch_size: int
    buffer_bytes: int
    request_timeout_ms: int
    gate_url: str | None
    gate_token: str | None
    gate_timeout_s: float


class EventEmitter(EventHelpers[Coroutine[Any, Any, AgentEvent]]):
    """Sends agent-event/v1 events to Kafka: key = ``conversation_id`` (UTF-8), value =
    ``event.to_json()``, ``acks="all"``, batched by ``linger_ms``/``max_batch_size`` into record
    batches of its own (``monitor.sdk.batches``: the partition aiokafka's and Java's default
    partitioners pick for the key, a fifth of ``AIOKafkaProducer.send``'s CPU per event).

    Lifecycle: ``await start()`` (or ``async with``), then ``send``/helpers, then ``close()``.
    Use it from one event loop (the one that called ``start``); for threads use
    ``SyncEventEmitter``. Events of one conversation sent through one emitter keep their order.

    Delivery contract:
      * ``send()`` returning means the event is valid and queued in this process, nothing more.
      * ``flush()`` returning means every event whose ``send()`` returned before ``flush()`` was
        called is acknowledged by the broker (all in-sync replicas). If any event sent so far
        failed, ``flush()`` waits for the rest and raises ``DeliveryError`` naming how many
        failed (each failure is reported by exactly one ``flush``/``close``).
      * ``close()`` rejects new sends at once, waits for sends in progress, flushes (same
        guarantee and error as ``flush``) and stops the producer, even if the flush raised.
        Events not yet flushed when the process dies are lost; call ``close()`` on shutdown.
      * With ``idempotent=False`` a retried batch can be written twice; consumers deduplicate on
        ``event_id``. ``idempotent=True`` prevents that but needs broker support (see below).
    Failed deliveries surface after ``request_timeout_ms`` (aiokafka retries until then).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = "agent-events",
        *,
        idempotent: bool = True,
        linger_ms: int = 20,
        max_batch_size: int = 256 * 1024,
        buffer_bytes: int = 32 * 1024 * 1024,
        agent: Agent | None = None,
        context: Context | None = None,
        clock: Callable[[], datetime] | None = None,
        request_timeout_ms: int = 30_000,
        gate_url: str | None = None,
        gate_token: str | None = None,
        gate_timeout_s: float = 2.0,
    ) -> None:
        """Configure the emitter; nothing connects until ``start()``.

        Args:
            bootstrap_servers: "host:port[,host:port...]" of the Kafka cluster.
            topic: the events topic.
            idempotent: enable the idempotent producer (no duplicates on retry). The embedded
                Tansu broker (memory storage) rejects InitProducerId, so against it this must be
                ``False``; ``start()`` otherwise fails with ``EmitterError``.
            linger_ms, max_batch_size: batching; a batch leaves when full or ``linger_ms`` old.
            buffer_bytes: events not yet acknowledged may hold this many bytes; ``send`` waits
                for space beyond it (like Java's ``buffer.memory``).
            agent, context: defaults for the helpers (each call can override them).
            clock: returns the aware "now" for ``ts`` (default: system clock, UTC).
            request_timeout_ms: how long a send may wait for buffer space and a batch may wait
                for its acknowledgement before it counts as failed.
            gate_url, gate_token, gate_timeout_s: the gate process's web address for ``gate()``
                (``monitor gate serve``, e.g. http://monitor:6067), its bearer token, the
                longest wait per call.
        """
        super().__init__(agent, context, clock)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.idempotent = idempotent
        self._producer_config: dict[str, Any] = {
            "bootstrap_servers": bootstrap_servers,
            "acks": "all",
            "enable_idempotence": idempotent,
            "linger_ms": 0,  # our batches are closed when shipped: aiokafka sends them at once
            "max_batch_size": max_batch_size,
            "request_timeout_ms": request_timeout_ms,
            "client_id": "agent-monitor-sdk",
        }
        self._linger_s = linger_ms / 1000
        self._buffer_bytes = buffer_bytes
        self._timeout_s = request_timeout_ms / 1000
        self._gate_config = (gate_url, gate_token, gate_timeout_s)
        self._gate: GateClient | None = None
        self._producer: Any = None  # AIOKafkaProducer once started
        self._batches: Batches | None = None
        self._state: Literal["new", "running", "closing", "closed"] = "new"
        self._enqueuing = 0
        self._idle: asyncio.Event | None = None
        self._closed: asyncio.Event | None = None

    @property
    def pending(self) -> int:
        """Events queued or in flight, not yet acknowledged nor failed."""
        return 0 if self._batches is None else self._batches.pending

    async def start(self) -> None:
        """Connect the producer. A no-op when already running.

        Raises:
            EmitterNotRunning: the emitter was closed (a closed emitter cannot restart).
            EmitterError: the producer could not start (broker unreachable, idempotence refused);
                the emitter stays unstarted and ``start()`` may be retried.
        """
        if self._state == "running":
            return
        if self._state != "new":
            raise EmitterNotRunning("emitter is closed; create a new one")
        producer = AIOKafkaProducer(**self._producer_config)
        try:
            await producer.start()
        except Exception as exc:
            await producer.stop()
            hint = _IDEMPOTENCE_HINT if self.idempotent else ""
            raise EmitterError(
                f"could not start the Kafka producer for {self.bootstrap_servers}: "
                f"{describe(exc)}{hint}"
            ) from exc
        self._producer = producer
        self._batches = Batches(
            producer,
            self.topic,
            linger_s=self._linger_s,
            buffer_bytes=self._buffer_bytes,
            timeout_s=self._timeout_s,
        )
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = asyncio.Event()
        self._state = "running"

    async def send(self, event: AgentEvent) -> None:
        """Queue one event for delivery (see the class docstring for what is guaranteed when).

        Waits only while ``buffer_bytes`` are unacknowledged (up to ``request_timeout_ms``).

        Raises:
            TypeError: ``event`` is not an ``AgentEvent``.
            EmitterNotRunning: called before ``start()`` or after ``close()``.
            InvalidEvent: the serialized event exceeds 256 KiB (reason ``oversize``).
            EmitterError: the buffer stayed full for ``request_timeout_ms`` (event not queued).
        """
        if not isinstance(event, AgentEvent):
            raise TypeError(f"send() takes an AgentEvent, got {type(event).__name__}")
        if self._state != "running":
            raise EmitterNotRunning(
                "emitter is closed"
                if self._state != "new"
                else "emitter is not started; await start() or use 'async with'"
            )
        value = event.to_json()
        if len(value) > MAX_EVENT_BYTES:
            raise InvalidEvent(
                "oversize", None, f"event is {len(value)} bytes, limit is {MAX_EVENT_BYTES}"
            )
        assert self._idle is not None and self._batches is not None
        self._enqueuing += 1
        self._idle.clear()
        try:
            await self._batches.add(event, event.conversation_id.encode("utf-8"), value)
        except BufferFull as exc:
            raise EmitterError(f"event not queued: {exc} (is the broker reachable?)") from exc
        finally:
            self._enqueuing -= 1
            if self._enqueuing == 0:
                self._idle.set()

    async def _emit_and_return(self, event: AgentEvent) -> AgentEvent:
        await self.send(event)
        return event

    def _emit(self, event: AgentEvent) -> Coroutine[Any, Any, AgentEvent]:
        return self._emit_and_return(event)

    async def flush(self) -> None:
        """Wait until every event sent before this call is acknowledged or has failed.

        Batches still lingering are sent at once (flush does not wait out ``linger_ms``).
        A no-op before ``start()`` and after ``close()``. Cancelling it (e.g. a timeout with
        ``asyncio.wait_for``) does not cancel the deliveries themselves.

        Raises:
            DeliveryError: some events failed since the last report; ``failed`` counts them.
        """
        if self._batches is not None and (waiting := self._batches.ship_all()):
            await asyncio.wait(waiting)
        self._raise_failures()

    def _raise_failures(self) -> None:
        if self._batches is None:
            return
        failed, self._batches.failures = self._batches.failures, []
        if failed:
            raise DeliveryError([e for e, _ in failed], [x for _, x in failed])

    async def close(self) -> None:
        """Flush and stop. Idempotent: later (or concurrent) calls wait for the first to finish
        and return without raising. Sending after ``close()`` raises ``EmitterNotRunning``.

        Raises:
            DeliveryError: as ``flush()``; the producer is stopped all the same.
        """
        if self._gate is not None:
            gate, self._gate = self._gate, None
            await gate.aclose()
        if self._state == "new":
            self._state = "closed"
        if self._state == "closed":
            return
        assert self._idle is not None and self._closed is not None
        if self._state == "closing":
            await self._closed.wait()
            return
        self._state = "closing"
        try:
            await self._idle.wait()
            await self.flush()
        finally:
            try:
                await self._producer.stop()
            finally:
                self._state = "closed"
                self._closed.set()
        self._raise_failures()  # deliveries that failed while the producer stopped

    async def gate(
        self,
        conversation_id: str,
        content: str,
        *,
        confidence: float,
        agent: Agent | None = None,
        **options: Unpack[GateOptions],
    ) -> GateAnswer:
        """Ask the monitor's trust gate whether to send ``content`` (``POST /v1/gate``, over
        HTTP: works without ``start()``). The gate records the decision as an event itself.

        Args:
            conversation_id, content: the conversation and the message about to be sent.
            confidence: the agent's stated confidence in [0, 1] (the gate calibrates it).
            tool_calls: the calls the message carries; history: the conversation's earlier
                events (what the inline checks compare the message with).
            domain, tier: default from the emitter's context; agent from the emitter's.
            request_id: makes the decision event's id ``gate:<request_id>``.

        Raises:
            ValueError: no agent known. GateError: the gate refused (status, reason).
            GateUnavailable: unreachable or slower than ``gate_timeout_s``.
        """
        url, token, timeout = self._gate_config
        if url is None:
            raise EmitterError(
                "gate() needs gate_url= (the gate process's web address, monitor gate serve)"
            )
        domain = self.context.domain if self.context else None
        body = body_for(
            agent or self.agent, domain, conversation_id, content, confidence, **options
        )
        if self._gate is None:
            self._gate = GateClient(url, token, timeout=timeout)
        return await self._gate.ask(body)

    async def __aenter__(self) -> EventEmitter:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
