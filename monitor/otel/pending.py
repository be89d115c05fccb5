"""The durable side of the trace assembly: waiting spans and log records, mapped traces.

``PendingTraces`` reads and writes ``otel_pending_spans``, ``otel_pending_records`` and
``otel_traces`` (``monitor.store.tables_otel``). Bounds (docs/otel.md "Trace assembly"): a span
waits at most ``deadline_s`` seconds, at most ``max_spans`` spans wait (beyond, the traces that
waited longest are mapped under the fallback first), a trace with its root waits ``grace_s``
for LLM spans below a lone agent span and ``content_wait_s`` for the GenAI log records of LLM
spans without content, a log record whose span never comes is deleted after ``deadline_s``,
and mapped traces are remembered ``memory_s`` seconds for their late spans. The clock is
injected (``now``). A failing database raises ``StoreUnavailable`` (a retryable answer
upstream).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Text,
    any_,
    bindparam,
    cast,
    delete,
    func,
    literal_column,
    null,
    select,
    tuple_,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import CollectionAggregate
from sqlalchemy.sql.selectable import CompoundSelect

from monitor.config import Settings
from monitor.core.errors import StoreUnavailable
from monitor.otel import mapping_config
from monitor.otel.assembly import TraceContext, waiting_for
from monitor.otel.log_events import LogEvent, by_span
from monitor.otel.spans import Span
from monitor.otel.traces import Scope, SpanKey, TraceAssembler, Waiting
from monitor.store.engine import make_engine
from monitor.store.tables_otel import otel_pending_records as records_t
from monitor.store.tables_otel import otel_pending_spans as pending_t
from monitor.store.tables_otel import otel_traces as traces_t

P = ParamSpec("P")
T = TypeVar("T")


def _guarded(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    @functools.wraps(method)
    async def call(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except (OSError, SQLAlchemyError) as exc:
            raise StoreUnavailable(f"trace assembly store unavailable: {exc}") from exc

    return call


@dataclass(frozen=True)
class PendingLimits:
    deadline_s: float = 600.0
    max_spans: int = 100_000
    memory_s: float = 3600.0
    grace_s: float = 30.0  # a trace with its root and no LLM span waits this long for them
    content_wait_s: float = 5.0  # an LLM span without content waits this long for its records


class PendingTraces:
    """Waiting spans and mapped traces (see the module docstring)."""

    def __init__(
        self, engine: AsyncEngine, limits: PendingLimits, now: Callable[[], datetime]
    ) -> None:
        self.engine = engine
        self.limits = limits
        self.now = now

    @_guarded
    async def load(
        self, trace_ids: Iterable[str], with_records: bool = True, with_contexts: bool = True
    ) -> Waiting:
        """The waiting spans of ``trace_ids`` and (``with_records``) their log records and
        (``with_contexts``) the remembered contexts of those already mapped; without
        ``with_contexts``, the contexts of the traces with waiting spans only."""
        ids = sorted(set(trace_ids))
        if not ids:
            return Waiting()
        async with self.engine.connect() as conn:
            return await _load(conn, ids, with_records, with_contexts)

    @_guarded
    async def records(self, trace_ids: Iterable[str]) -> list[LogEvent]:
        """The waiting log records of ``trace_ids``."""
        ids = sorted(set(trace_ids))
        if not ids:
            return []
        async with self.engine.connect() as conn:
            return await _records(conn, ids)

    @_guarded
    async def park(
        self, spans: list[Span], scope: Scope = None, records: Sequence[LogEvent] = ()
    ) -> Waiting:
        """Store ``spans`` and GenAI log ``records`` as waiting, sent under ``scope`` (the agent
        patterns of the sender's key; None: every agent); a span or record already waiting
        keeps its first arrival and scope. Returns what waits for their traces once they are
        committed (``load`` of them, on the same connection): another request may have parked
        its root meanwhile."""
        if not spans and not records:
            return Waiting()
        now = self.now()
        patterns = None if scope is None else list(scope)
        rows = [
            {
                "trace_id": s.trace_id,
                "span_id": s.span_id,
                "received_at": now,
                "root": s.is_local_root,
                "span": s.to_json(),
                "scope": patterns,
            }
            for s in spans
        ]
        record_rows = [
            {
                "trace_id": r.trace_id,
                "span_id": r.span_id,
                "record_key": r.key,
                "received_at": now,
                "record": r.to_json(),
                "scope": patterns,
            }
            for r in records
        ]
        ids = sorted({s.trace_id for s in spans} | {r.trace_id for r in records})
        async with self.engine.connect() as conn:
            async with conn.begin():
                if rows:
                    # executemany: one cached statement, not one compiled per row count
                    await conn.execute(insert(pending_t).on_conflict_do_nothing(), rows)
                if record_rows:
                    await conn.execute(insert(records_t).on_conflict_do_nothing(), record_rows)
            return await _load(conn, ids, True, True)  # after the commit

    @_guarded
    async def settle(
        self,
        settled: dict[str, tuple[str, TraceContext]],
        done: list[Span],
        joined: Iterable[SpanKey] = (),
        look: bool = False,
    ) -> Waiting:
        """Remember the traces just mapped and delete those of their spans that were mapped
        (after publishing): a span parked meanwhile stays for the next look. The waiting log
        records of the ``joined`` spans (mapped with their content) are deleted too. With
        ``look``, returns the spans still waiting for the settled traces once committed and
        the contexts of their traces (``load(settled, with_records=False,
        with_contexts=False)``, on the same connection); else nothing."""
        used = sorted(set(joined))
        if used and not settled:
            async with self.engine.begin() as conn:
                await _delete_records(conn, used)
        if not settled:
            return Waiting()
        ordered = sorted(settled.items())
        columns = {
            "trace_ids": [trace_id for trace_id, _ in ordered],
            "conversation_ids": [ctx.conversation_id for _, (_, ctx) in ordered],
            "agent_ids": [ctx.agent_id for _, (_, ctx) in ordered],
            "llm_calls": [ctx.llm_calls for _, (_, ctx) in ordered],
            "hows": [how for _, (how, _) in ordered],
            "resolved_at": self.now(),
        }
        async with self.engine.connect() as conn:
            async with conn.begin():
                await conn.execute(_REMEMBER_TRACES, columns)
                keys = sorted({(s.trace_id, s.span_id) for s in done if s.trace_id in settled})
                if keys:
                    trace_ids, span_ids = (list(column) for column in zip(*keys, strict=True))
                    await conn.execute(
                        _DELETE_SPANS, {"trace_ids": trace_ids, "span_ids": span_ids}
                    )
                if used:
                    await _delete_records(conn, used)
            if not look:
                return Waiting()
            return await _load(conn, [t for t, _ in ordered], False, False)  # after the commit

    @_guarded
    async def due(self, limit: int = 1000) -> tuple[dict[str, list[Span]], str]:
        """Traces to map as they are now: spans of a trace already mapped (parked while another
        request mapped it: ``late``), else waiting past the deadline (``deadline``), else with
        their root and nothing new for as long as what they wait for allows (``root``: the
        grace period for LLM spans below a lone agent span, the content wait for the log
        records of LLM spans without content), else the longest waiting while more than
        ``max_spans`` spans wait (``overflow``)."""
        cutoff = self.now() - timedelta(seconds=self.limits.deadline_s)
        first = func.min(pending_t.c.received_at)
        async with self.engine.connect() as conn:
            late = await conn.execute(
                select(pending_t.c.trace_id)
                .join(traces_t, traces_t.c.trace_id == pending_t.c.trace_id)
                .distinct()
                .limit(limit)
            )
            ids: list[str] = [str(r[0]) for r in late]
            how = "late"
            if not ids:
                how = "deadline"
                found = await conn.execute(
                    select(pending_t.c.trace_id)
                    .group_by(pending_t.c.trace_id)
                    .having(first < cutoff)
                    .order_by(first)
                    .limit(limit)
                )
                ids = [str(r[0]) for r in found]
            if not ids:
                how = "root"
                ids = await self._quiet(conn, limit)
            if not ids:
                total = (await conn.execute(select(func.count()).select_from(pending_t))).scalar()
                excess = int(total or 0) - self.limits.max_spans
                if excess <= 0:
                    return {}, how
                how = "overflow"
                oldest = await conn.execute(
                    select(pending_t.c.trace_id, func.count())
                    .group_by(pending_t.c.trace_id)
                    .order_by(first)
                    .limit(limit)
                )
                for trace_id, n in oldest:
                    ids.append(str(trace_id))
                    excess -= int(str(n))
                    if excess <= 0:
                        break
            out = await _spans(conn, ids)
        return out, how

    async def _quiet(self, conn: AsyncConnection, limit: int) -> list[str]:
        """Traces with their root whose wait is over: nothing new came for ``grace_s`` (a lone
        agent span) or ``content_wait_s`` (LLM spans without content, records included)."""
        now = self.now()
        grace = now - timedelta(seconds=self.limits.grace_s)
        content = self.limits.content_wait_s > 0
        shortest = min(self.limits.grace_s, self.limits.content_wait_s or self.limits.grace_s)
        last = func.max(pending_t.c.received_at)
        found = await conn.execute(
            select(pending_t.c.trace_id, last)
            .group_by(pending_t.c.trace_id)
            .having(func.bool_or(pending_t.c.root) & (last < now - timedelta(seconds=shortest)))
            .order_by(last)
            .limit(limit)
        )
        quiet_since: dict[str, datetime] = {str(t): at for t, at in found.tuples()}
        if not content or not quiet_since:
            return [t for t, at in quiet_since.items() if at < grace]
        ids = sorted(quiet_since)
        spans = await _spans(conn, ids)
        records = await _records(conn, ids)
        arrivals = await conn.execute(
            select(records_t.c.trace_id, func.max(records_t.c.received_at))
            .where(_among(records_t.c.trace_id, ids))
            .group_by(records_t.c.trace_id)
        )
        for trace_id, at in arrivals.tuples():
            quiet_since[str(trace_id)] = max(quiet_since[str(trace_id)], at)
        of_span = by_span(records)
        content_cutoff = now - timedelta(seconds=self.limits.content_wait_s)
        out = []
        for trace_id in quiet_since:
            reason = waiting_for(spans.get(trace_id, []), of_span, True)
            if reason == "witness" and quiet_since[trace_id] >= grace:
                continue
            if reason == "content" and quiet_since[trace_id] >= content_cutoff:
                continue
            out.append(trace_id)
        return out

    @_guarded
    async def scopes(self, trace_ids: Iterable[str]) -> dict[str, list[tuple[str, ...]]]:
        """The distinct scopes of the spans and log records waiting for each of ``trace_ids``
        (traces whose waiting spans and records all came under a credential for every agent are
        left out)."""
        ids = sorted(set(trace_ids))
        if not ids:
            return {}
        out: dict[str, list[tuple[str, ...]]] = {}
        among = _any_of(ids)  # one array parameter for both tables
        spans, records = (
            select(table.c.trace_id, table.c.scope).where(
                table.c.trace_id == among, table.c.scope.is_not(None)
            )
            for table in (pending_t, records_t)
        )
        async with self.engine.connect() as conn:
            rows = await conn.execute(spans.union(records))  # one statement, distinct rows
            for trace_id, scope in rows.tuples():
                patterns = tuple(str(p) for p in scope)
                if patterns not in out.get(str(trace_id), []):
                    out.setdefault(str(trace_id), []).append(patterns)
        return out

    @_guarded
    async def contexts(self, trace_ids: Iterable[str]) -> dict[str, TraceContext]:
        """The remembered contexts of those of ``trace_ids`` already mapped."""
        ids = sorted(set(trace_ids))
        if not ids:
            return {}
        async with self.engine.connect() as conn:
            return await _contexts(conn, ids)

    @_guarded
    async def waiting(self) -> int:
        """How many spans wait."""
        async with self.engine.connect() as conn:
            total = (await conn.execute(select(func.count()).select_from(pending_t))).scalar()
        return int(total or 0)

    @_guarded
    async def waiting_records(self) -> int:
        """How many GenAI log records wait."""
        async with self.engine.connect() as conn:
            total = (await conn.execute(select(func.count()).select_from(records_t))).scalar()
        return int(total or 0)

    @_guarded
    async def forget(self) -> int:
        """Delete mapped traces older than the memory window; log records of traces already
        mapped whose span is not waiting (parked while their trace was being mapped: their
        span was mapped with the content it had); and log records older than the deadline
        (their span never came). How many records were deleted for age."""
        cutoff = self.now() - timedelta(seconds=self.limits.memory_s)
        stale = self.now() - timedelta(seconds=self.limits.deadline_s)
        span_waits = (
            select(pending_t.c.span_id)
            .where(
                pending_t.c.trace_id == records_t.c.trace_id,
                pending_t.c.span_id == records_t.c.span_id,
            )
            .exists()
        )
        mapped = select(traces_t.c.trace_id).where(traces_t.c.trace_id == records_t.c.trace_id)
        async with self.engine.begin() as conn:
            await conn.execute(delete(traces_t).where(traces_t.c.resolved_at < cutoff))
            await conn.execute(delete(records_t).where(mapped.exists(), ~span_waits))
            result = await conn.execute(delete(records_t).where(records_t.c.received_at < stale))
        return int(result.rowcount or 0)


def _among(column: ColumnElement[str], ids: list[str]) -> ColumnElement[bool]:
    """``column = ANY(:ids)``: one array parameter, so one statement whatever the number of
    ids (an ``IN`` list is compiled and prepared again for each count)."""
    return column == _any_of(ids)


def _any_of(ids: list[str]) -> CollectionAggregate[bool]:
    """``ANY(:ids)``, the right side of :func:`_among`."""
    return any_(bindparam("ids", ids, type_=ARRAY(Text), unique=True))


# the keys as two arrays: one statement whatever their number (a prepared statement reused),
# not an IN list of as many parameters, compiled and prepared again for each count
_KEYS = (
    func.unnest(bindparam("trace_ids", type_=ARRAY(Text)), bindparam("span_ids", type_=ARRAY(Text)))
    .table_valued("trace_id", "span_id")
    .render_derived()
)
_DELETE_SPANS = delete(pending_t).where(
    tuple_(pending_t.c.trace_id, pending_t.c.span_id).in_(select(_KEYS.c.trace_id, _KEYS.c.span_id))
)


# the settled traces as one array per column (one statement whatever their number); a trace
# mapped again keeps its first context, its time is renewed and it had LLM calls if either had
_SETTLED = (
    func.unnest(
        bindparam("trace_ids", type_=ARRAY(Text)),
        bindparam("conversation_ids", type_=ARRAY(Text)),
        bindparam("agent_ids", type_=ARRAY(Text)),
        bindparam("llm_calls", type_=ARRAY(Boolean)),
        bindparam("hows", type_=ARRAY(Text)),
    )
    .table_valued("trace_id", "conversation_id", "agent_id", "llm_calls", "how")
    .render_derived()
)
_INSERT_TRACES = insert(traces_t).from_select(
    ["trace_id", "conversation_id", "agent_id", "llm_calls", "how", "resolved_at"],
    select(
        _SETTLED.c.trace_id,
        _SETTLED.c.conversation_id,
        _SETTLED.c.agent_id,
        _SETTLED.c.llm_calls,
        _SETTLED.c.how,
        bindparam("resolved_at", type_=traces_t.c.resolved_at.type),
    ),
)
_REMEMBER_TRACES = _INSERT_TRACES.on_conflict_do_update(
    index_elements=[traces_t.c.trace_id],
    set_={
        "resolved_at": _INSERT_TRACES.excluded.resolved_at,
        "llm_calls": traces_t.c.llm_calls | _INSERT_TRACES.excluded.llm_calls,
    },
)


_SPAN, _CONTEXT, _RECORD = 0, 1, 2


def _load_statement(with_records: bool, with_contexts: bool) -> CompoundSelect[Any]:
    """``PendingTraces.load`` as one statement: the waiting spans of the traces ``:ids``, the
    remembered contexts of those already mapped (without ``with_contexts``: of those with
    waiting spans only) and (``with_records``) their waiting log records, as rows ``(part,
    trace_id, body, conversation_id, agent_id, llm_calls)``; ``part`` says which."""
    ids = any_(bindparam("ids", type_=ARRAY(Text)))
    text, flag = cast(null(), Text), cast(null(), Boolean)
    spans = select(
        literal_column(str(_SPAN)), pending_t.c.trace_id, pending_t.c.span, text, text, flag
    ).where(pending_t.c.trace_id == ids)
    contexts = select(
        literal_column(str(_CONTEXT)),
        traces_t.c.trace_id,
        text,
        traces_t.c.conversation_id,
        traces_t.c.agent_id,
        traces_t.c.llm_calls,
    ).where(traces_t.c.trace_id == ids)
    if not with_contexts:
        waits = select(pending_t.c.span_id).where(pending_t.c.trace_id == traces_t.c.trace_id)
        contexts = contexts.where(waits.exists())
    parts = [spans, contexts]
    if with_records:
        parts.append(
            select(
                literal_column(str(_RECORD)),
                records_t.c.trace_id,
                records_t.c.record,
                text,
                text,
                flag,
            ).where(records_t.c.trace_id == ids)
        )
    return union_all(*parts)


_LOAD = {(r, c): _load_statement(r, c) for r in (False, True) for c in (False, True)}


async def _load(
    conn: AsyncConnection, ids: list[str], with_records: bool, with_contexts: bool
) -> Waiting:
    """``PendingTraces.load`` on ``conn``: one statement, one round trip, one snapshot."""
    out = Waiting()
    rows = await conn.execute(_LOAD[with_records, with_contexts], {"ids": ids})
    for part, trace_id, body, conversation, agent, llm_calls in rows.tuples():
        if part == _SPAN:
            out.spans.setdefault(str(trace_id), []).append(Span.from_json(str(body)))
        elif part == _CONTEXT:
            out.contexts[str(trace_id)] = _context(conversation, agent, llm_calls)
        else:
            out.records.append(LogEvent.from_json(str(body)))
    return out


async def _spans(conn: AsyncConnection, ids: list[str]) -> dict[str, list[Span]]:
    """The waiting spans of the traces ``ids``."""
    rows = await conn.execute(
        select(pending_t.c.trace_id, pending_t.c.span).where(_among(pending_t.c.trace_id, ids))
    )
    out: dict[str, list[Span]] = {}
    for trace_id, text in rows:
        out.setdefault(str(trace_id), []).append(Span.from_json(str(text)))
    return out


async def _records(conn: AsyncConnection, ids: list[str]) -> list[LogEvent]:
    """The waiting log records of the traces ``ids``."""
    rows = await conn.execute(select(records_t.c.record).where(_among(records_t.c.trace_id, ids)))
    return [LogEvent.from_json(str(text)) for (text,) in rows]


async def _delete_records(conn: AsyncConnection, keys: list[SpanKey]) -> None:
    """Delete the waiting log records of the spans ``keys`` (used by their mapping)."""
    await conn.execute(
        delete(records_t).where(tuple_(records_t.c.trace_id, records_t.c.span_id).in_(keys))
    )


async def _contexts(conn: AsyncConnection, ids: list[str]) -> dict[str, TraceContext]:
    """The remembered contexts of those of the traces ``ids`` already mapped."""
    known = await conn.execute(
        select(
            traces_t.c.trace_id,
            traces_t.c.conversation_id,
            traces_t.c.agent_id,
            traces_t.c.llm_calls,
        ).where(_among(traces_t.c.trace_id, ids))
    )
    return {str(t): _context(c, a, k) for t, c, a, k in known}


def _context(conversation: object, agent: object, llm_calls: object) -> TraceContext:
    return TraceContext(
        None if conversation is None else str(conversation),
        None if agent is None else str(agent),
        bool(llm_calls),
    )


def trace_assembler(settings: Settings) -> TraceAssembler:
    """The assembler over the settings' Postgres (an engine that connects on first use)."""
    assert settings.database_url
    limits = PendingLimits(
        deadline_s=settings.otel_pending_seconds,
        max_spans=settings.otel_pending_max_spans,
        memory_s=settings.otel_trace_memory_seconds,
        grace_s=settings.otel_witness_wait_seconds,
        content_wait_s=settings.otel_content_wait_seconds,
    )
    store = PendingTraces(make_engine(settings.database_url, pool_size=2), limits, _now)
    return TraceAssembler(
        mapping_config(settings), store, wait_for_content=limits.content_wait_s > 0
    )


def _now() -> datetime:
    return datetime.now(UTC)
