"""The worst conversations of a time range by the rules of the dashboards' "Examples" panels.

Each rule is a SQL function of migration 0035 (``examples_calibration``, ``examples_drift``,
``examples_escalation``, ``examples_judges``; their rules are in that migration's docstring and
docs/conversations.md); the panels and :func:`worst_conversations` call the same functions, so
the report and the dashboards pick the same conversations. The ``why`` texts come redacted
(``monitor_redact``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

#: the rules, by the dashboard whose Examples panel uses each
KINDS = ("calibration", "drift", "escalation", "judges")
ALL = "__all__"  # the dashboards' All


@dataclass(frozen=True)
class Example:
    """One conversation a rule picked, and why (one line)."""

    kind: str
    at: datetime
    conversation_id: str
    agent_id: str
    domain: str | None
    tier: int | None
    confidence: float | None
    why: str


async def worst_conversations(
    engine: AsyncEngine,
    kind: str,
    start: datetime,
    end: datetime,
    agent: str | None = None,
    n: int = 3,
) -> list[Example]:
    """Up to ``n`` conversations of ``[start, end]`` by the rule ``kind`` (one of
    :data:`KINDS`; the escalation rule gives up to ``n`` of each of its two sides), of
    ``agent`` (None: every agent), in the rule's order. Raises ValueError for another kind or
    ``n`` < 1."""
    if kind not in KINDS:
        raise ValueError(f"no examples rule {kind!r} (one of {', '.join(KINDS)})")
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    sql = text(
        f"SELECT * FROM examples_{kind}(:lo, :hi, :agents, :all, :all, :n)"  # kind checked
    )
    params = {"lo": start, "hi": end, "agents": [agent or ALL], "all": [ALL], "n": n}
    async with engine.connect() as conn:
        rows = (await conn.execute(sql, params)).mappings().all()
    return [
        Example(
            kind,
            r["time"],
            r["conversation_id"],
            r["agent_id"],
            r["domain"],
            r["tier"],
            r["confidence"],
            r["why"],
        )
        for r in rows
    ]
