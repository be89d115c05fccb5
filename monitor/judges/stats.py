"""Read-side queries about the judges: volumes, errors, latency, categories, the
conversation-level judgements their quality is measured on (:mod:`monitor.judges.quality`),
and the worker's stored labelling decisions per scope.

Time range ``[start, end)`` applies to when the judged conversation started (its
``first_ts``, as for the escalation analytics), not to when the verdict was written: judging a
replayed week of traffic today reports it under that week. The agent filter applies to the
verdict's ``agent_id`` (``*`` and ``?`` wildcards as in :class:`Segment`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.repo import Segment
from monitor.judges.quality import ConversationJudgement


@dataclass
class JudgeVolume:
    """One judge (name + version): what it produced in the range."""

    judge: str
    judge_version: str
    verdicts: int
    errors: int
    failures: int  # ok verdicts with label 0
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    error_reasons: dict[str, int] = field(default_factory=dict)
    categories: dict[str, int] = field(default_factory=dict)
    truncated: int = 0  # conversations judged on their first and last events only (the cap)


# the verdict's conversation started in [lo, hi)
IN_RANGE = (
    "EXISTS (SELECT 1 FROM conversations c WHERE c.conversation_id = v.conversation_id"
    " AND c.first_ts >= :lo AND c.first_ts < :hi)"
)


def _agent(segment: Segment) -> tuple[str, dict[str, Any]]:
    cond, params = Segment(segment.agent).where("v.")
    return cond, params


async def _rows(engine: AsyncEngine, sql: str, params: dict[str, Any]) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def judge_volumes(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> list[JudgeVolume]:
    """Per judge and version, ordered by judge name."""
    cond, params = _agent(segment)
    rng = f"{IN_RANGE} AND {cond}"
    p = {"lo": start, "hi": end, **params}
    rows = await _rows(
        engine,
        (
            "SELECT judge, judge_version, count(*), count(*) FILTER (WHERE status = 'error'),"
            " count(*) FILTER (WHERE status = 'ok' AND label = 0),"
            " percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms),"
            " percentile_cont(0.9) WITHIN GROUP (ORDER BY latency_ms),"
            " count(DISTINCT conversation_id) FILTER (WHERE evidence ? 'truncated')"
            f" FROM verdicts v WHERE {rng} GROUP BY 1, 2 ORDER BY 1, 2"
        ),
        p,
    )
    errors = await _rows(
        engine,
        (
            "SELECT judge, judge_version, coalesce(error, '?'), count(*) FROM verdicts v"
            f" WHERE status = 'error' AND {rng} GROUP BY 1, 2, 3"
        ),
        p,
    )
    cats = await _rows(
        engine,
        (
            "SELECT judge, judge_version, c, count(*) FROM verdicts v,"
            f" jsonb_array_elements_text(v.categories) AS c WHERE {rng} GROUP BY 1, 2, 3"
        ),
        p,
    )
    out = {
        (r[0], r[1]): JudgeVolume(r[0], r[1], r[2], r[3], r[4], r[5], r[6], truncated=r[7])
        for r in rows
    }
    for j, v, reason, n in errors:
        out[(j, v)].error_reasons[str(reason).split(":")[0]] = int(n)
    for j, v, c, n in cats:
        out[(j, v)].categories[str(c)] = int(n)
    return list(out.values())


async def conversation_judgements(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> list[ConversationJudgement]:
    """Per (judge, version, conversation with an outcome) on which the judge gave an ok verdict
    with a label (it applied): flagged (any label 0), the categories of its failures, and
    whether the conversation failed. Message-level and conversation-level verdicts count."""
    cond, params = _agent(segment)
    rows = await _rows(
        engine,
        (
            "SELECT v.judge, v.judge_version, v.conversation_id, bool_or(v.label = 0),"
            " string_agg(DISTINCT cat.c, ',') FILTER (WHERE v.label = 0),"
            " bool_and(c.outcome_success), min(c.agent_id), coalesce(min(c.domain), '')"
            " FROM verdicts v JOIN conversations c USING (conversation_id)"
            " LEFT JOIN LATERAL jsonb_array_elements_text(v.categories) AS cat(c) ON TRUE"
            " WHERE v.status = 'ok' AND v.label IS NOT NULL AND c.outcome_success IS NOT NULL"
            f" AND c.first_ts >= :lo AND c.first_ts < :hi AND {cond}"
            " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        ),
        {"lo": start, "hi": end, **params},
    )
    return [
        ConversationJudgement(
            str(cid),
            str(j),
            str(ver),
            bool(flagged),
            frozenset(str(cats).split(",")) if cats else frozenset(),
            not ok,
            str(agent),
            str(domain),
        )
        for j, ver, cid, flagged, cats, ok, agent, domain in rows
    ]


@dataclass(frozen=True)
class StoredLabelling:
    """A row of ``judge_quality``: the worker's last decision for a judge in a scope
    (``agent_id`` '' = its pooled row), the one the item labels follow."""

    judge: str
    judge_version: str
    agent_id: str
    domain: str
    pairs: int
    flagged: int
    precision: float | None
    precision_low: float | None
    precision_high: float | None
    decided_by: str
    labels: bool
    floor: float
    computed_at: datetime


async def stored_labelling(engine: AsyncEngine, segment: Segment) -> list[StoredLabelling]:
    """The stored decisions of the scopes of agents matching ``segment.agent`` and every
    judge's pooled row, ordered by judge, version, scope (pooled first)."""
    cond, params = Segment(segment.agent).where("q.")
    rows = await _rows(
        engine,
        (
            "SELECT judge, judge_version, agent_id, domain, pairs, flagged, precision,"
            " precision_low, precision_high, decided_by, labels, floor, computed_at"
            f" FROM judge_quality q WHERE (agent_id = '' OR {cond}) ORDER BY 1, 2, 3, 4"
        ),
        params,
    )
    return [StoredLabelling(*r) for r in rows]


@dataclass(frozen=True)
class Flag:
    """One failure verdict as ``monitor judges --flags`` quotes it: what was wrong
    (``rationale``: for a policy rule, the tool call, the reason and the clause) and the events
    it rests on (``evidence``: for a policy rule, the calls and the tool results / user turns)."""

    judge: str
    conversation_id: str
    item_id: str | None
    rationale: str | None
    evidence: dict[str, Any]


async def recent_flags(
    engine: AsyncEngine,
    segment: Segment,
    start: datetime,
    end: datetime,
    limit: int,
    judge_like: str = "%",
) -> list[Flag]:
    """The ``limit`` latest failure verdicts (label 0) of judges whose name is ``LIKE
    judge_like``, newest first."""
    cond, params = _agent(segment)
    rows = await _rows(
        engine,
        (
            "SELECT v.judge, v.conversation_id, v.item_id, v.rationale, v.evidence"
            " FROM verdicts v WHERE v.status = 'ok' AND v.label = 0 AND v.judge LIKE :like"
            f" AND {IN_RANGE} AND {cond} ORDER BY v.created_at DESC, v.judge, v.item_id"
            " LIMIT :n"
        ),
        {"lo": start, "hi": end, "like": judge_like, "n": limit, **params},
    )
    return [
        Flag(str(j), str(c), None if i is None else str(i), r, e if isinstance(e, dict) else {})
        for j, c, i, r, e in rows
    ]
