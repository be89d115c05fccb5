"""Read-side queries behind alert observations (:mod:`monitor.alerts.observations`).

Each function takes an ``AsyncEngine`` and a half-open range ``[start, end)`` of aware
datetimes, opens one short connection, and returns plain values keyed by the segment
``(agent_id, domain, tier)`` with the analytics sentinels (``""`` = no domain, ``0`` = no tier).
Calibration sums and escalation inputs come from :mod:`monitor.analytics.repo`.

Time bases: drift checks by ``recent_to``; conversations by ``first_ts`` (agent time);
verdicts by ``created_at``; events by ``ingested_at`` and dead letters by ``received_at``
(the monitor's own time: a dead letter has no trustworthy agent timestamp).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncEngine

SegmentTuple = tuple[str, str, int]


async def _rows_between(
    engine: AsyncEngine, sql: TextClause, start: datetime, end: datetime
) -> list[Any]:
    """The rows of ``sql``, whose window is ``:lo`` = ``start`` and ``:hi`` = ``end``."""
    async with engine.connect() as conn:
        return list((await conn.execute(sql, {"lo": start, "hi": end})).all())


@dataclass(frozen=True)
class DriftRow:
    """The latest stored drift check of one segment (summed over agent versions by the
    caller): whether it fired, which tests fired, and the recent window's item count."""

    segment: SegmentTuple
    fired: bool
    fired_tests: tuple[str, ...]
    n_recent: int
    recent_to: datetime
    reason: str


async def latest_drift_checks(
    engine: AsyncEngine, start: datetime, end: datetime
) -> list[DriftRow]:
    """Per (agent, version, domain, tier), the check with the latest ``recent_to`` in
    ``(start, end]`` (ties: the latest ``checked_at``); ordered by segment."""
    sql = text(
        "SELECT DISTINCT ON (agent_id, agent_version, domain, tier) agent_id, domain, tier,"
        " fired, fired_tests, n_recent, recent_to, reason FROM drift_checks"
        " WHERE recent_to > :lo AND recent_to <= :hi"
        " ORDER BY agent_id, agent_version, domain, tier, recent_to DESC, checked_at DESC"
    )
    rows = await _rows_between(engine, sql, start, end)
    return [
        DriftRow(
            (str(a), str(d), int(t)),
            bool(fired),
            tuple(x for x in str(tests).split(",") if x),
            int(n),
            rto,
            str(reason),
        )
        for a, d, t, fired, tests, n, rto, reason in rows
    ]


async def conversation_segments(
    engine: AsyncEngine, start: datetime, end: datetime
) -> list[SegmentTuple]:
    """Segments with at least one weighted conversation starting in ``[start, end)``."""
    sql = text(
        "SELECT DISTINCT agent_id, coalesce(domain, ''), coalesce(tier, 0) FROM conversations"
        " WHERE sample_weight > 0 AND first_ts >= :lo AND first_ts < :hi ORDER BY 1, 2, 3"
    )
    rows = await _rows_between(engine, sql, start, end)
    return [(str(a), str(d), int(t)) for a, d, t in rows]


async def verdict_categories(
    engine: AsyncEngine, start: datetime, end: datetime
) -> list[tuple[SegmentTuple, tuple[str, ...], int]]:
    """``(segment, categories, n)``: how many ``ok`` verdicts created in ``[start, end)`` had
    exactly that category list, per segment (domain and tier from the conversation)."""
    sql = text(
        "SELECT v.agent_id, coalesce(c.domain, ''), coalesce(c.tier, 0), v.categories,"
        " count(*) FROM verdicts v LEFT JOIN conversations c"
        " ON c.conversation_id = v.conversation_id"
        " WHERE v.status = 'ok' AND v.created_at >= :lo AND v.created_at < :hi"
        " GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3"
    )
    rows = await _rows_between(engine, sql, start, end)
    return [
        ((str(a), str(d), int(t)), tuple(str(c) for c in (cats or [])), int(n))
        for a, d, t, cats, n in rows
    ]


# events ingested in [lo, hi): the whole minutes from the event_minutes roll-up (by minute of
# ingested_at, kept when the raw events of conversations outside the sample are gone), the
# partial minutes at the edges (none when the bounds are whole minutes) from events
_DLQ_COUNTS = text("""
WITH b AS (
  SELECT CAST(:lo AS timestamptz) AS lo, CAST(:hi AS timestamptz) AS hi,
    date_trunc('minute', CAST(:lo AS timestamptz) + interval '59.999999 seconds', 'UTC') AS a,
    date_trunc('minute', CAST(:hi AS timestamptz), 'UTC') AS z
)
SELECT CASE WHEN b.a < b.z THEN
    (SELECT count(*) FROM events WHERE ingested_at >= b.lo AND ingested_at < b.a)
    + (SELECT coalesce(sum(events), 0) FROM event_minutes WHERE minute >= b.a AND minute < b.z)
    + (SELECT count(*) FROM events WHERE ingested_at >= b.z AND ingested_at < b.hi)
  ELSE (SELECT count(*) FROM events WHERE ingested_at >= b.lo AND ingested_at < b.hi) END,
  (SELECT count(*) FROM dead_letters WHERE received_at >= b.lo AND received_at < b.hi)
FROM b
""")


async def dlq_counts(engine: AsyncEngine, start: datetime, end: datetime) -> tuple[int, int]:
    """``(events ingested, dead letters received)`` in ``[start, end)``: the events from the
    ``event_minutes`` roll-up for the whole minutes (exact after the raw events of
    conversations outside the sample are gone) and from ``events`` for the partial minutes at
    the edges."""
    async with engine.connect() as conn:
        row = (await conn.execute(_DLQ_COUNTS, {"lo": start, "hi": end})).one()
    return int(row[0]), int(row[1])


#: a ``gate`` event's decision let the message through unchecked, enforced
#: (``metrics.Metric.GATE_FAIL_OPEN_RATE``)
GATE_FAIL_OPEN = """body->'gate'->>'enforced' IS DISTINCT FROM 'false' AND (
         body->'gate'->>'degraded' LIKE 'fail open%'
         OR body->'gate'->>'degraded' LIKE 'llm %: on_llm_timeout proceed')"""
_GATE_DECISIONS = text(f"""
SELECT agent_id, coalesce(domain, ''), coalesce(tier, 0), count(*),
       count(*) FILTER (WHERE body->'gate'->>'decision' = 'escalate'),
       count(*) FILTER (WHERE body->'gate'->>'degraded' IS NOT NULL),
       count(*) FILTER (WHERE body->'gate'->>'enforced' IS DISTINCT FROM 'false'),
       count(*) FILTER (WHERE {GATE_FAIL_OPEN})
FROM events WHERE type = 'gate' AND ts >= :lo AND ts < :hi GROUP BY 1, 2, 3
""")
_GATE_PROCEEDED = text("""
WITH last AS (
  SELECT DISTINCT ON (conversation_id) conversation_id, agent_id, coalesce(domain, '') AS d,
         coalesce(tier, 0) AS t, body->'gate'->>'decision' AS decision
  FROM events WHERE type = 'gate' AND ts >= :lo AND ts < :hi
  ORDER BY conversation_id, ts DESC, event_id DESC)
SELECT l.agent_id, l.d, l.t, count(*) FILTER (WHERE c.outcome_success IS NOT NULL),
       count(*) FILTER (WHERE c.outcome_success = false)
FROM last l JOIN conversations c ON c.conversation_id = l.conversation_id
WHERE l.decision = 'proceed' GROUP BY 1, 2, 3
""")


class GateCounts(NamedTuple):
    """One segment's gate decisions in a window (see :func:`gate_counts`)."""

    decisions: int
    escalated: int
    degraded: int
    proceeded_known: int
    proceeded_failed: int
    enforced: int = 0
    fail_open: int = 0


async def gate_counts(
    engine: AsyncEngine, start: datetime, end: datetime
) -> dict[SegmentTuple, GateCounts]:
    """Per segment, the gate's decision events in ``[start, end)``: all, escalated, degraded,
    proceeded (latest decision of the conversation) with an outcome and failed among those,
    enforced (not shadow) and enforced fail-open (``metrics.Metric.GATE_FAIL_OPEN_RATE``)."""
    params = {"lo": start, "hi": end}
    async with engine.connect() as conn:
        decided: list[Any] = list((await conn.execute(_GATE_DECISIONS, params)).all())
        proceeded: list[Any] = list((await conn.execute(_GATE_PROCEEDED, params)).all())
    out: dict[SegmentTuple, GateCounts] = {}
    for a, d, t, n, esc, deg, enf, fo in decided:
        out[(str(a), str(d), int(t))] = GateCounts(
            int(n), int(esc), int(deg), 0, 0, int(enf), int(fo)
        )
    for a, d, t, known, failed in proceeded:
        key = (str(a), str(d), int(t))
        c = out.get(key, GateCounts(0, 0, 0, 0, 0))
        out[key] = c._replace(proceeded_known=int(known), proceeded_failed=int(failed))
    return out
