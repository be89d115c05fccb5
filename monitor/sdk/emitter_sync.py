"""The blocking emitter for agents that are not async (import it from ``monitor.sdk``)."""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, TypeVar, Unpack

from monitor.contract.events import Agent, AgentEvent, Context
from monitor.core.errors import EmitterError, EmitterNotRunning
from monitor.sdk.base import EventHelpers
from monitor.sdk.emitter_async import EmitterOptions, EventEmitter
from monitor.sdk.gate_client import GateAnswer, GateOptions, SyncGateClient, body_for

T = TypeVar("T")


class SyncEventEmitter(EventHelpers[AgentEvent]):
    """``EventEmitter`` for blocking code: it owns an event loop in a daemon thread and every
    method blocks until the loop has done the work. Safe to call from any number of threads.

    Same arguments, helpers and delivery contract as ``EventEmitter`` (``send`` = queued,
    ``flush`` = acknowledged or ``DeliveryError``, ``close`` = flush + stop, idempotent), with
    ``start()``/``flush()``/``close()`` blocking. ``close()`` also runs at interpreter exit if
    you forgot it. Do not call it from inside a running event loop: it would block that loop.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = "agent-events",
        *,
        agent: Agent | None = None,
        context: Context | None = None,
        clock: Callable[[], datetime] | None = None,
        **options: Unpack[EmitterOptions],
    ) -> None:
        """See ``EventEmitter.__init__``; nothing connects, no thread starts until ``start()``."""
        super().__init__(agent, context, clock)
        self._async = EventEmitter(
            bootstrap_servers, topic, agent=agent, context=context, clock=clock, **options
        )
        # gate() calls the gate over a blocking client of its own, configured alike
        self._gate_config = self._async._gate_config
        self._gate: SyncGateClient | None = None
        self._lock = threading.Lock()
        self._state: Literal["new", "running", "closed"] = "new"
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        """Events queued or in flight, not yet acknowledged nor failed."""
        return self._async.pending

    def start(self) -> None:
        """Start the loop thread and connect (no-op when running); raises like ``EventEmitter``."""
        with self._lock:
            if self._state == "running":
                return
            if self._state == "closed":
                raise EmitterNotRunning("emitter is closed; create a new one")
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="monitor-sdk", daemon=True)
            thread.start()
            try:
                asyncio.run_coroutine_threadsafe(self._async.start(), loop).result()
            except BaseException:
                self._stop_loop(loop, thread)
                raise
            self._loop, self._thread, self._state = loop, thread, "running"
            atexit.register(self.close)

    def _call(self, make: Callable[[], Coroutine[Any, Any, T]], timeout: float | None = None) -> T:
        # Submit under the lock so that nothing reaches the loop after close() was submitted.
        with self._lock:
            if self._state != "running" or self._loop is None:
                raise EmitterNotRunning(
                    "emitter is closed"
                    if self._state == "closed"
                    else "emitter is not started; call start() or use 'with'"
                )
            future = asyncio.run_coroutine_threadsafe(make(), self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def send(self, event: AgentEvent) -> None:
        """Queue one event; blocks only while the producer buffer is full (see ``EventEmitter``)."""
        if not isinstance(event, AgentEvent):
            raise TypeError(f"send() takes an AgentEvent, got {type(event).__name__}")
        self._call(lambda: self._async.send(event))

    def _emit(self, event: AgentEvent) -> AgentEvent:
        self.send(event)
        return event

    def flush(self, timeout: float | None = None) -> None:
        """Block until every event sent (by any thread) before this call is acknowledged.

        Raises:
            DeliveryError: some events failed since the last report (``failed`` counts them).
            TimeoutError: ``timeout`` seconds passed first (deliveries go on).
            EmitterNotRunning: before ``start()`` or after ``close()``.
        """
        self._call(self._async.flush, timeout)

    def close(self) -> None:
        """Flush, stop the producer and the loop thread. Idempotent and thread-safe: other
        callers wait for the first close to finish and return without raising.

        Raises:
            DeliveryError: as ``flush()``; everything is stopped all the same.
        """
        future: Future[None] | None = None
        with self._lock:
            gate, self._gate = self._gate, None
            state, self._state = self._state, "closed"
            loop, thread = self._loop, self._thread
            if state == "running" and loop is not None:
                future = asyncio.run_coroutine_threadsafe(self._async.close(), loop)
        if gate is not None:
            gate.close()
        if state == "new":
            self._stopped.set()
        if future is None or loop is None or thread is None:
            self._stopped.wait()
            return
        atexit.unregister(self.close)
        try:
            future.result()
        finally:
            self._stop_loop(loop, thread)
            self._stopped.set()

    def gate(
        self,
        conversation_id: str,
        content: str,
        *,
        confidence: float,
        agent: Agent | None = None,
        **options: Unpack[GateOptions],
    ) -> GateAnswer:
        """Blocking ``EventEmitter.gate``: ask the trust gate whether to send ``content``
        (HTTP; works without ``start()``). Raises ValueError (no agent), GateError (refused),
        GateUnavailable (unreachable or slower than ``gate_timeout_s``)."""
        url, token, timeout = self._gate_config
        if url is None:
            raise EmitterError(
                "gate() needs gate_url= (the gate process's web address, monitor gate serve)"
            )
        domain = self.context.domain if self.context else None
        body = body_for(
            agent or self.agent, domain, conversation_id, content, confidence, **options
        )
        with self._lock:
            if self._gate is None:
                self._gate = SyncGateClient(url, token, timeout=timeout)
            client = self._gate
        return client.ask(body)

    @staticmethod
    def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def __enter__(self) -> SyncEventEmitter:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
