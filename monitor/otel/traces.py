"""Spans of export requests -> events, whole traces at a time (``/v1/traces`` and the topic).

``TraceAssembler.prepare(spans)`` loads what waits for the request's traces, parks the spans
whose trace root is still unknown, and maps the rest (``monitor.otel.assembly``,
``monitor.otel.mapping``); the caller publishes ``prepared.mapped.events`` and then calls
``settle(prepared)``, which remembers the mapped traces and deletes their waiting spans, so a
crash between the two re-maps them (same event ids) instead of losing them. ``sweep()`` maps
the traces that waited past the deadline or beyond the count bound under the fallback; its
result is published and settled the same way. Without a store (``store=None``) every request
is mapped as it is. Store failures raise ``StoreUnavailable`` (a retryable answer upstream).

Spans are parked with the scope of the key that sent them (``prepare(spans, scope)``). Whoever
maps a trace later (the request bringing its root, another request, the sweep), the events
mapped from a trace with waiting spans are kept only for agents that every scope recorded on
those spans allows; the others are rejected (``out_of_scope``). The request's own key is
checked by its endpoint.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from monitor.auth.keys import agent_matches
from monitor.contract.events import Publish
from monitor.otel.assembly import TraceContext, expire, plan
from monitor.otel.mapping import Mapped, MappingConfig, map_spans
from monitor.otel.spans import Span

Scope = tuple[str, ...] | None  # a key's agent patterns; None: every agent


def map_scoped(
    spans: list[Span],
    config: MappingConfig,
    contexts: dict[str, TraceContext] | None,
    scopes: Mapping[str, list[tuple[str, ...]]],
) -> Mapped:
    """``map_spans``, keeping of each trace in ``scopes`` only the events whose agent every
    one of its scopes allows (the others rejected as ``out_of_scope``)."""
    limited = {s.trace_id for s in spans if scopes.get(s.trace_id)}
    out = map_spans([s for s in spans if s.trace_id not in limited], config, contexts)
    for trace_id in sorted(limited):
        part = map_spans([s for s in spans if s.trace_id == trace_id], config, contexts)
        kept = []
        for event in part.events:
            if all(agent_matches(scope, event.agent.id) for scope in scopes[trace_id]):
                kept.append(event)
            else:
                part.reject(
                    f"out_of_scope: agent {event.agent.id[:140]!r} of trace {trace_id} is "
                    "outside the scope of a key that sent its spans"
                )
        part.events = kept
        out.add(part)
    return out


class PendingStore(Protocol):
    """The durable side (``monitor.otel.pending.PendingTraces``)."""

    def load(
        self, trace_ids: Iterable[str]
    ) -> Awaitable[tuple[dict[str, list[Span]], dict[str, TraceContext]]]: ...
    def park(self, spans: list[Span], scope: Scope = None) -> Awaitable[None]: ...
    def scopes(self, trace_ids: Iterable[str]) -> Awaitable[dict[str, list[tuple[str, ...]]]]: ...
    def settle(
        self, settled: dict[str, tuple[str, TraceContext]], done: list[Span]
    ) -> Awaitable[None]: ...
    def due(self) -> Awaitable[tuple[dict[str, list[Span]], str]]: ...
    def contexts(self, trace_ids: Iterable[str]) -> Awaitable[dict[str, TraceContext]]: ...
    def waiting(self) -> Awaitable[int]: ...
    def forget(self) -> Awaitable[int]: ...


@dataclass
class Prepared:
    """Events to publish, spans parked, and the traces to settle once published."""

    mapped: Mapped
    parked: int = 0
    settle: dict[str, tuple[str, TraceContext]] = field(default_factory=dict)
    done: list[Span] = field(default_factory=list)  # the spans mapped (deleted if waiting)

    def resolutions(self) -> dict[str, int]:
        """Traces settled by how (``root``, ``late``, ``deadline``, ``overflow``)."""
        out: dict[str, int] = {}
        for how, _ in self.settle.values():
            out[how] = out.get(how, 0) + 1
        return out


class TraceAssembler:
    """See the module docstring."""

    def __init__(self, config: MappingConfig, store: PendingStore | None = None) -> None:
        self.config = config
        self.store = store

    async def prepare(self, spans: list[Span], scope: Scope = None) -> Prepared:
        """Map what is ready of ``spans`` (sent under ``scope``) and park the rest."""
        if self.store is None:
            return Prepared(map_spans(spans, self.config))
        trace_ids = {s.trace_id for s in spans if s.well_formed is None}
        pending, resolved = await self.store.load(trace_ids)
        todo = plan(spans, pending, resolved)
        await self.store.park(todo.park, scope)
        if todo.park:  # another request of the same trace may have parked its root meanwhile
            again = plan([], *await self.store.load({s.trace_id for s in todo.park}))
            todo.ready.extend(again.ready)
            todo.contexts.update(again.contexts)
            todo.settle.update(again.settle)
        parked = {s.trace_id for s in todo.park}
        waited = {t for t in todo.settle if t in pending or t in parked}  # spans in the store
        scopes = await self.store.scopes(waited) if waited else {}
        mapped = map_scoped(todo.ready, self.config, todo.contexts, scopes)
        done = [s for s in todo.ready if s.trace_id in todo.settle]
        mapped.spans = len(spans)
        return Prepared(mapped, len(todo.park), todo.settle, done)

    async def handle(
        self,
        spans: list[Span],
        publish: Publish,
        scope: Scope = None,
    ) -> Prepared:
        """``prepare``, publish, ``settle``; then the spans another request parked while these
        traces were being mapped (it looked before they were settled) are mapped, published and
        settled too (``late``), so that they do not wait for the sweep."""
        prepared = await self.prepare(spans, scope)
        if prepared.mapped.events:
            await publish(prepared.mapped.events)
        await self.settle(prepared)
        if self.store is None or not prepared.settle:
            return prepared
        waiting, resolved = await self.store.load(prepared.settle)
        if waiting:
            todo = expire(waiting, resolved, "late")
            scopes = await self.store.scopes(waiting)
            late = map_scoped(todo.ready, self.config, todo.contexts, scopes)
            if late.events:
                await publish(late.events)
            await self.store.settle(todo.settle, todo.ready)
            late.spans = 0  # counted by the request that parked them
            prepared.mapped.add(late)
            prepared.settle.update(todo.settle)
        return prepared

    async def settle(self, prepared: Prepared) -> None:
        if self.store is not None and prepared.settle:
            await self.store.settle(prepared.settle, prepared.done)

    async def sweep(self) -> Prepared:
        """The traces due under the fallback (nothing without a store)."""
        if self.store is None:
            return Prepared(Mapped())
        due, how = await self.store.due()
        if not due:
            return Prepared(Mapped())
        resolved = await self.store.contexts(due)
        todo = expire(due, resolved, how)
        scopes = await self.store.scopes(due)
        mapped = map_scoped(todo.ready, self.config, todo.contexts, scopes)
        return Prepared(mapped, 0, todo.settle, todo.ready)

    async def waiting(self) -> int:
        if self.store is None:
            return 0
        return await self.store.waiting()

    async def forget(self) -> int:
        if self.store is None:
            return 0
        return await self.store.forget()
