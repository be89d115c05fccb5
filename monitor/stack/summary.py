"""Read-only summary queries: what landed in Postgres (used by ``monitor up``).

A :class:`Scope` narrows every query to one run: events and conversations whose
``conversation_id`` starts with a prefix, dead letters whose raw bytes contain a marker.
The default scope is the whole database. Nothing here writes; every function opens a short
connection from the given engine and returns plain values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import ColumnElement, Integer, func, select, text, true
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.gate.effect import GatedConversation
from monitor.store.tables import conversations, dead_letters, events


@dataclass(frozen=True)
class Scope:
    """Which rows count. ``None`` fields do not filter.

    Attributes:
        conversation_prefix: events/conversations whose ``conversation_id`` starts with it
            (matched literally: ``%`` and ``_`` are escaped).
        raw_marker: dead letters whose ``raw`` bytes contain it.
    """

    conversation_prefix: str | None = None
    raw_marker: bytes | None = None

    def events(self) -> ColumnElement[bool]:
        if self.conversation_prefix is None:
            return true()
        return events.c.conversation_id.startswith(self.conversation_prefix, autoescape=True)

    def conversations(self) -> ColumnElement[bool]:
        if self.conversation_prefix is None:
            return true()
        return conversations.c.conversation_id.startswith(self.conversation_prefix, autoescape=True)

    def dead_letters(self) -> ColumnElement[bool]:
        if self.raw_marker is None:
            return true()
        return dead_letters.c.raw.contains(self.raw_marker)


@dataclass(frozen=True)
class AgentSummary:
    """One agent's conversations: how many, how many escalated, how many with an outcome and
    how many of those succeeded; ``mean_confidence`` is the mean of ``min_confidence`` over
    the conversations with an outcome and a confidence (``None`` if there are none), the
    number to hold against ``success_share`` (docs/design.md, conversation-level items)."""

    agent_id: str
    conversations: int
    escalated: int
    with_outcome: int
    succeeded: int
    mean_confidence: float | None = None

    @property
    def escalated_share(self) -> float | None:
        """Escalated / conversations, in [0, 1]; ``None`` without conversations."""
        return self.escalated / self.conversations if self.conversations else None

    @property
    def success_share(self) -> float | None:
        """Succeeded / conversations with an outcome, in [0, 1]; ``None`` without outcomes."""
        return self.succeeded / self.with_outcome if self.with_outcome else None


@dataclass(frozen=True)
class Summary:
    """Per-agent conversations (sorted by agent id), events per type and dead letters per
    reason (both sorted by descending count, then name)."""

    agents: list[AgentSummary] = field(default_factory=list)
    events_by_type: dict[str, int] = field(default_factory=dict)
    dead_letters_by_reason: dict[str, int] = field(default_factory=dict)

    @property
    def conversations(self) -> int:
        return sum(a.conversations for a in self.agents)

    @property
    def events(self) -> int:
        return sum(self.events_by_type.values())

    @property
    def dead_letters(self) -> int:
        return sum(self.dead_letters_by_reason.values())


async def ingested_counts(engine: AsyncEngine, scope: Scope = Scope()) -> tuple[int, int]:
    """``(events, dead_letters)`` stored within ``scope``: a cheap poll for "caught up yet?"."""
    n_events = select(func.count()).select_from(events).where(scope.events()).scalar_subquery()
    n_dead = (
        select(func.count()).select_from(dead_letters).where(scope.dead_letters()).scalar_subquery()
    )
    async with engine.connect() as conn:
        row = (await conn.execute(select(n_events, n_dead))).one()
    return int(row[0]), int(row[1])


async def agent_summaries(engine: AsyncEngine, scope: Scope = Scope()) -> list[AgentSummary]:
    """Conversations per agent within ``scope``, sorted by ``agent_id``."""
    c = conversations.c
    stmt = (
        select(
            c.agent_id,
            func.count(),
            func.count().filter(c.escalated),
            func.count(c.outcome_success),
            func.coalesce(func.sum(c.outcome_success.cast(Integer)), 0),
            func.avg(c.min_confidence).filter(c.outcome_success.is_not(None)),
        )
        .where(scope.conversations())
        .group_by(c.agent_id)
        .order_by(c.agent_id)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    return [
        AgentSummary(
            str(r[0]),
            int(r[1]),
            int(r[2]),
            int(r[3]),
            int(r[4]),
            None if r[5] is None else float(r[5]),
        )
        for r in rows
    ]


async def _counts_by(
    engine: AsyncEngine, column: ColumnElement[str], where: ColumnElement[bool]
) -> dict[str, int]:
    n = func.count()
    stmt = select(column, n).where(where).group_by(column).order_by(n.desc(), column)
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    return {str(r[0]): int(r[1]) for r in rows}


async def events_by_type(engine: AsyncEngine, scope: Scope = Scope()) -> dict[str, int]:
    """Stored events per ``type`` within ``scope`` (types with no events are absent)."""
    return await _counts_by(engine, events.c.type, scope.events())


async def dead_letters_by_reason(engine: AsyncEngine, scope: Scope = Scope()) -> dict[str, int]:
    """Stored dead letters per machine-readable ``reason`` within ``scope``."""
    return await _counts_by(engine, dead_letters.c.reason, scope.dead_letters())


async def load_summary(engine: AsyncEngine, scope: Scope = Scope()) -> Summary:
    """All three summaries within ``scope`` (three short read-only queries)."""
    return Summary(
        agents=await agent_summaries(engine, scope),
        events_by_type=await events_by_type(engine, scope),
        dead_letters_by_reason=await dead_letters_by_reason(engine, scope),
    )


_GATED = text("""
SELECT DISTINCT ON (conversation_id) agent_id, coalesce(domain, '') AS domain, decision,
  CASE WHEN outcome_known THEN NOT failed END AS success, degraded
FROM v_gate_decisions
WHERE CAST(:prefix AS text) IS NULL OR left(conversation_id, length(:prefix)) = :prefix
ORDER BY conversation_id, time DESC, event_id DESC""")


async def gated_conversations(
    engine: AsyncEngine, scope: Scope = Scope()
) -> tuple[list[GatedConversation], int]:
    """Each gated conversation's latest decision within ``scope`` (view ``v_gate_decisions``,
    as ``monitor gate`` reads them) and how many of those were degraded (fail open/closed)."""
    async with engine.connect() as conn:
        rows = (await conn.execute(_GATED, {"prefix": scope.conversation_prefix})).all()
    out = [GatedConversation(str(r[0]), str(r[1]), str(r[2]), r[3]) for r in rows]
    return out, sum(bool(r[4]) for r in rows)
