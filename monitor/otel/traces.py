"""Spans of export requests -> events, whole traces at a time (``/v1/traces`` and the topic).

``TraceAssembler.prepare(spans)`` loads what waits for the request's traces, parks the spans
whose trace root is still unknown, and maps the rest (``monitor.otel.assembly``,
``monitor.otel.mapping``); the caller publishes ``prepared.mapped.events`` and then calls
``settle(prepared)``, which remembers the mapped traces and deletes their waiting spans, so a
crash between the two re-maps them (same event ids) instead of losing them. ``sweep()`` maps
the traces that waited past the deadline or beyond the count bound under the fallback; its
result is published and settled the same way. Without a store (``store=None``) every request
is mapped as it is. Store failures raise ``StoreUnavailable`` (a retryable answer upstream).

GenAI log records (``/v1/logs``, ``monitor.otel.log_events``) go through the same steps
(``prepare(spans, scope, records)``): a record whose trace is not mapped yet waits in the store
beside the spans, whichever comes first; when the trace is mapped, each span takes the content
of its records if it has none of its own (``joined``), and the records used are deleted with the
spans. A trace with an LLM span that has no content and no record yet waits for its records
(``wait_for_content``) until they come or the sweep's content wait passes. A record whose trace
was mapped before it came, without its span, is too late (``late``): the events it could have
filled are stored already.

Spans are parked with the scope of the key that sent them (``prepare(spans, scope)``). Whoever
maps a trace later (the request bringing its root, another request, the sweep), the events
mapped from a trace with waiting spans are kept only for agents that every scope recorded on
those spans allows; the others are rejected (``out_of_scope``). The request's own key is
checked by its endpoint.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from monitor.auth.keys import agent_matches
from monitor.contract.events import Publish
from monitor.otel.assembly import TraceContext, expire, plan
from monitor.otel.log_events import LogEvent, awaits_content, by_span, with_content
from monitor.otel.mapping import Mapped, MappingConfig, map_spans
from monitor.otel.spans import Span

Scope = tuple[str, ...] | None  # a key's agent patterns; None: every agent
SpanKey = tuple[str, str]  # (trace id, span id)


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


def joined(spans: list[Span], records: Mapping[SpanKey, list[LogEvent]]) -> list[Span]:
    """``spans`` with the content of their GenAI log records (``log_events.with_content``)."""
    if not records:
        return spans
    return [with_content(s, records.get((s.trace_id, s.span_id), [])) for s in spans]


@dataclass
class Waiting:
    """What the store holds for some traces: waiting spans and log records, and the remembered
    contexts of those already mapped."""

    spans: dict[str, list[Span]] = field(default_factory=dict)
    contexts: dict[str, TraceContext] = field(default_factory=dict)
    records: list[LogEvent] = field(default_factory=list)


class PendingStore(Protocol):
    """The durable side (``monitor.otel.pending.PendingTraces``)."""

    def load(
        self, trace_ids: Iterable[str], with_records: bool = True, with_contexts: bool = True
    ) -> Awaitable[Waiting]: ...
    def park(
        self, spans: list[Span], scope: Scope = None, records: Sequence[LogEvent] = ()
    ) -> Awaitable[Waiting]: ...
    def scopes(self, trace_ids: Iterable[str]) -> Awaitable[dict[str, list[tuple[str, ...]]]]: ...
    def settle(
        self,
        settled: dict[str, tuple[str, TraceContext]],
        done: list[Span],
        joined: Iterable[SpanKey] = (),
        look: bool = False,
    ) -> Awaitable[Waiting]: ...
    def due(self) -> Awaitable[tuple[dict[str, list[Span]], str]]: ...
    def contexts(self, trace_ids: Iterable[str]) -> Awaitable[dict[str, TraceContext]]: ...
    def records(self, trace_ids: Iterable[str]) -> Awaitable[list[LogEvent]]: ...
    def waiting(self) -> Awaitable[int]: ...
    def waiting_records(self) -> Awaitable[int]: ...
    def forget(self) -> Awaitable[int]: ...


@dataclass
class Prepared:
    """Events to publish, spans parked, and the traces to settle once published; ``joined``:
    the spans whose waiting log records were used (deleted with them); ``records``: the
    request's log records by fate (``joined``, ``waiting``, ``late``)."""

    mapped: Mapped
    parked: int = 0
    settle: dict[str, tuple[str, TraceContext]] = field(default_factory=dict)
    done: list[Span] = field(default_factory=list)  # the spans mapped (deleted if waiting)
    joined: set[SpanKey] = field(default_factory=set)
    records: dict[str, int] = field(default_factory=dict)

    def resolutions(self) -> dict[str, int]:
        """Traces settled by how (``root``, ``late``, ``deadline``, ``overflow``)."""
        out: dict[str, int] = {}
        for how, _ in self.settle.values():
            out[how] = out.get(how, 0) + 1
        return out


class TraceAssembler:
    """See the module docstring."""

    def __init__(
        self,
        config: MappingConfig,
        store: PendingStore | None = None,
        *,
        wait_for_content: bool = False,
    ) -> None:
        self.config = config
        self.store = store
        self.wait_for_content = wait_for_content

    async def prepare(
        self, spans: list[Span], scope: Scope = None, records: Sequence[LogEvent] = ()
    ) -> Prepared:
        """Map what is ready of ``spans`` and GenAI log ``records`` (sent under ``scope``)
        and park the rest."""
        if self.store is None:
            mapped = map_spans(joined(spans, by_span(records)), self.config)
            return Prepared(mapped, records=_fates(records, spans, set()))
        trace_ids = {s.trace_id for s in spans if s.well_formed is None}
        trace_ids.update(r.trace_id for r in records)
        held = await self.store.load(trace_ids, with_records=bool(records))
        if not records and (needy := _contentless(spans, held.spans)):
            held.records = await self.store.records(needy)  # their content may wait there
        known = [*held.records, *records]
        todo = plan(spans, held.spans, held.contexts, by_span(known), self.wait_for_content)
        ready_traces = {s.trace_id for s in todo.ready}
        park_records = [
            r for r in records if r.trace_id not in ready_traces and r.trace_id not in held.contexts
        ]
        # what waits for the parked traces once parked: another request may have parked
        # their root meanwhile
        again = await self.store.park(todo.park, scope, park_records)
        stored = list(held.records)
        if todo.park or park_records:
            more = plan(
                [], again.spans, again.contexts, by_span(again.records), self.wait_for_content
            )
            todo.ready.extend(more.ready)
            todo.contexts.update(more.contexts)
            todo.settle.update(more.settle)
            stored.extend(again.records)
            known.extend(again.records)
        parked = {s.trace_id for s in todo.park} | {r.trace_id for r in park_records}
        had = set(held.spans) | {r.trace_id for r in held.records}
        waited = {t for t in todo.settle if t in had or t in parked}  # in the store
        scopes = await self.store.scopes(waited) if waited else {}
        records_of = by_span(known)
        mapped = map_scoped(joined(todo.ready, records_of), self.config, todo.contexts, scopes)
        done = [s for s in todo.ready if s.trace_id in todo.settle]
        mapped.spans = len(spans)
        ready_keys = {(s.trace_id, s.span_id) for s in todo.ready}
        used = ready_keys & {(r.trace_id, r.span_id) for r in stored}
        fates = _fates(records, todo.ready, {(r.trace_id, r.key) for r in park_records})
        return Prepared(mapped, len(todo.park), todo.settle, done, used, fates)

    async def handle(
        self,
        spans: list[Span],
        publish: Publish,
        scope: Scope = None,
        records: Sequence[LogEvent] = (),
    ) -> Prepared:
        """``prepare``, publish, ``settle``; then the spans another request parked while these
        traces were being mapped (it looked before they were settled) are mapped, published and
        settled too (``late``), so that they do not wait for the sweep."""
        prepared = await self.prepare(spans, scope, records)
        if prepared.mapped.events:
            await publish(prepared.mapped.events)
        if self.store is None or not prepared.settle:
            await self.settle(prepared)
            return prepared
        # settled, then what waits for the traces just settled (and their contexts, only
        # needed when spans wait for them), on one connection
        held = await self.store.settle(prepared.settle, prepared.done, prepared.joined, look=True)
        if held.spans:
            held.records = await self.store.records(held.spans)
            todo = expire(held.spans, held.contexts, "late")
            scopes = await self.store.scopes(held.spans)
            records_of = by_span(held.records)
            late = map_scoped(joined(todo.ready, records_of), self.config, todo.contexts, scopes)
            if late.events:
                await publish(late.events)
            await self.store.settle(todo.settle, todo.ready, _keys(todo.ready, held.records))
            late.spans = 0  # counted by the request that parked them
            prepared.mapped.add(late)
            prepared.settle.update(todo.settle)
        return prepared

    async def settle(self, prepared: Prepared) -> None:
        if self.store is not None and (prepared.settle or prepared.joined):
            await self.store.settle(prepared.settle, prepared.done, prepared.joined)

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
        records = await self.store.records(due)
        ready = joined(todo.ready, by_span(records))
        mapped = map_scoped(ready, self.config, todo.contexts, scopes)
        return Prepared(mapped, 0, todo.settle, todo.ready, _keys(todo.ready, records))

    async def waiting(self) -> int:
        if self.store is None:
            return 0
        return await self.store.waiting()

    async def waiting_records(self) -> int:
        if self.store is None:
            return 0
        return await self.store.waiting_records()

    async def forget(self) -> int:
        if self.store is None:
            return 0
        return await self.store.forget()


def _contentless(spans: list[Span], waiting: dict[str, list[Span]]) -> set[str]:
    """The traces of ``spans`` with an LLM span that carries no content of its own (with the
    spans ``waiting``): only their log records are worth loading."""
    traces: dict[str, list[Span]] = {}
    for s in spans:
        if s.well_formed is None:
            traces.setdefault(s.trace_id, []).append(s)
    return {t for t, mine in traces.items() if awaits_content([*waiting.get(t, []), *mine], {})}


def _keys(spans: list[Span], records: list[LogEvent]) -> set[SpanKey]:
    """The spans among ``spans`` that ``records`` (stored ones) belong to."""
    return {(s.trace_id, s.span_id) for s in spans} & {(r.trace_id, r.span_id) for r in records}


def _fates(
    records: Sequence[LogEvent], ready: list[Span], parked: set[tuple[str, str]]
) -> dict[str, int]:
    """How many of a request's ``records`` were joined to a span mapped now, wait in the
    store (``parked``: (trace id, record key)), or came too late (their trace was mapped
    before them without their span, or there is no store to wait in)."""
    keys = {(s.trace_id, s.span_id) for s in ready}
    out: dict[str, int] = {}
    for r in records:
        if (r.trace_id, r.span_id) in keys:
            fate = "joined"
        elif (r.trace_id, r.key) in parked:
            fate = "waiting"
        else:
            fate = "late"
        out[fate] = out.get(fate, 0) + 1
    return out
