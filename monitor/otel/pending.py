"""The durable side of the trace assembly: waiting spans and mapped traces in Postgres.

``PendingTraces`` reads and writes ``otel_pending_spans`` and ``otel_traces``
(``monitor.store.tables_otel``). Bounds (docs/otel.md "Trace assembly"): a span waits at most
``deadline_s`` seconds, at most ``max_spans`` spans wait (beyond, the traces that waited longest
are mapped under the fallback first), and mapped traces are remembered ``memory_s`` seconds for
their late spans. The clock is injected (``now``). A failing database raises
``StoreUnavailable`` (a retryable answer upstream).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import ParamSpec, TypeVar

from sqlalchemy import delete, func, select, tuple_
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from monitor.config import Settings
from monitor.core.errors import StoreUnavailable
from monitor.otel import mapping_config
from monitor.otel.assembly import TraceContext
from monitor.otel.spans import Span
from monitor.otel.traces import Scope, TraceAssembler
from monitor.store.engine import make_engine
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
        self, trace_ids: Iterable[str]
    ) -> tuple[dict[str, list[Span]], dict[str, TraceContext]]:
        """The waiting spans and the remembered contexts of ``trace_ids``."""
        ids = sorted(set(trace_ids))
        if not ids:
            return {}, {}
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(pending_t.c.trace_id, pending_t.c.span).where(pending_t.c.trace_id.in_(ids))
            )
            waiting: dict[str, list[Span]] = {}
            for trace_id, text in rows:
                waiting.setdefault(str(trace_id), []).append(Span.from_json(str(text)))
            resolved = await _contexts(conn, ids)
        return waiting, resolved

    @_guarded
    async def park(self, spans: list[Span], scope: Scope = None) -> None:
        """Store ``spans`` as waiting, sent under ``scope`` (the agent patterns of the sender's
        key; None: every agent); a span already waiting keeps its first arrival and scope."""
        if not spans:
            return
        now = self.now()
        rows = [
            {
                "trace_id": s.trace_id,
                "span_id": s.span_id,
                "received_at": now,
                "root": s.is_local_root,
                "span": s.to_json(),
                "scope": None if scope is None else list(scope),
            }
            for s in spans
        ]
        async with self.engine.begin() as conn:
            await conn.execute(insert(pending_t).values(rows).on_conflict_do_nothing())

    @_guarded
    async def settle(self, settled: dict[str, tuple[str, TraceContext]], done: list[Span]) -> None:
        """Remember the traces just mapped and delete those of their spans that were mapped
        (after publishing): a span parked meanwhile stays for the next look."""
        if not settled:
            return
        now = self.now()
        rows = [
            {
                "trace_id": trace_id,
                "conversation_id": ctx.conversation_id,
                "agent_id": ctx.agent_id,
                "llm_calls": ctx.llm_calls,
                "how": how,
                "resolved_at": now,
            }
            for trace_id, (how, ctx) in sorted(settled.items())
        ]
        stmt = insert(traces_t).values(rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=[traces_t.c.trace_id],
            set_={
                "resolved_at": stmt.excluded.resolved_at,
                "llm_calls": traces_t.c.llm_calls | stmt.excluded.llm_calls,
            },
        )
        async with self.engine.begin() as conn:
            await conn.execute(stmt)
            keys = sorted({(s.trace_id, s.span_id) for s in done if s.trace_id in settled})
            if keys:
                await conn.execute(
                    delete(pending_t).where(
                        tuple_(pending_t.c.trace_id, pending_t.c.span_id).in_(keys)
                    )
                )

    @_guarded
    async def due(self, limit: int = 1000) -> tuple[dict[str, list[Span]], str]:
        """Traces to map as they are now: spans of a trace already mapped (parked while another
        request mapped it: ``late``), else waiting past the deadline (``deadline``), else with
        their root and nothing new for the grace period (``root``), else the longest waiting
        while more than ``max_spans`` spans wait (``overflow``)."""
        cutoff = self.now() - timedelta(seconds=self.limits.deadline_s)
        grace = self.now() - timedelta(seconds=self.limits.grace_s)
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
            quiet = func.max(pending_t.c.received_at) < grace
            criteria = (
                ("deadline", first < cutoff),
                ("root", func.bool_or(pending_t.c.root) & quiet),
            )
            for name, having in criteria:
                if ids:
                    break
                how = name
                found = await conn.execute(
                    select(pending_t.c.trace_id)
                    .group_by(pending_t.c.trace_id)
                    .having(having)
                    .order_by(first)
                    .limit(limit)
                )
                ids = [str(r[0]) for r in found]
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
            rows = await conn.execute(
                select(pending_t.c.trace_id, pending_t.c.span).where(pending_t.c.trace_id.in_(ids))
            )
            out: dict[str, list[Span]] = {}
            for trace_id, text in rows:
                out.setdefault(str(trace_id), []).append(Span.from_json(str(text)))
        return out, how

    @_guarded
    async def scopes(self, trace_ids: Iterable[str]) -> dict[str, list[tuple[str, ...]]]:
        """The distinct scopes of the spans waiting for each of ``trace_ids`` (traces whose
        waiting spans all came under a credential for every agent are left out)."""
        ids = sorted(set(trace_ids))
        if not ids:
            return {}
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(pending_t.c.trace_id, pending_t.c.scope)
                .where(pending_t.c.trace_id.in_(ids), pending_t.c.scope.is_not(None))
                .distinct()
            )
            out: dict[str, list[tuple[str, ...]]] = {}
            for trace_id, scope in rows.tuples():
                out.setdefault(str(trace_id), []).append(tuple(str(p) for p in scope))
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
    async def forget(self) -> int:
        """Delete mapped traces older than the memory window; how many."""
        cutoff = self.now() - timedelta(seconds=self.limits.memory_s)
        async with self.engine.begin() as conn:
            result = await conn.execute(delete(traces_t).where(traces_t.c.resolved_at < cutoff))
        return int(result.rowcount or 0)


async def _contexts(conn: AsyncConnection, ids: list[str]) -> dict[str, TraceContext]:
    """The remembered contexts of those of the traces ``ids`` already mapped."""
    known = await conn.execute(
        select(
            traces_t.c.trace_id,
            traces_t.c.conversation_id,
            traces_t.c.agent_id,
            traces_t.c.llm_calls,
        ).where(traces_t.c.trace_id.in_(ids))
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
    )
    store = PendingTraces(make_engine(settings.database_url, pool_size=2), limits, _now)
    return TraceAssembler(mapping_config(settings), store)


def _now() -> datetime:
    return datetime.now(UTC)
