"""Judge-noise-aware calibration: how much of a calibration report rests on judge labels, how
good those judges are, and the accuracy corrected for their error rates.

Items are labelled by their conversation's outcome when it has one, else by the judges
(docs/analytics.md). For each agent of the report this reads

- the labelled items in the range by ``label_source`` (``outcome:*`` or ``judge:<names>``), so
  the report can say which share of its labels are judge labels;
- per judge: its quality against conversation outcomes in the range (precision, recall =
  sensitivity, specificity; :mod:`monitor.judges.quality`), and, on the agent's
  conversations **without** an outcome that the judge applied to, the share it flagged ``q``.

The judge's implied success rate there is ``1 - q`` (raw); the Rogan-Gladen correction with the
judge's measured sensitivity and specificity gives the corrected one
(:func:`~monitor.judges.quality.corrected_accuracy`). Both are conversation-level
success rates (the items of a conversation share its label). The correction assumes the judge's
error rates on conversations without an outcome equal those measured on conversations with one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from monitor.analytics.repo import Segment, whole_hours
from monitor.judges.quality import (
    CorrectedAccuracy,
    JudgeQuality,
    corrected_accuracy,
    judge_quality,
)
from monitor.judges.stats import conversation_judgements


@dataclass(frozen=True)
class JudgeCorrection:
    """One judge on one agent's conversations without an outcome, with its measured quality."""

    judge: str
    judge_version: str
    quality: JudgeQuality | None  # None: no conversation with an outcome to measure it on
    judged_without_outcome: int
    flagged_without_outcome: int
    accuracy: CorrectedAccuracy | None


@dataclass(frozen=True)
class JudgeLabels:
    """How one agent's labelled items in the range were labelled."""

    labelled_items: int
    judge_labelled_items: int
    judge_share: float
    sources: dict[str, int] = field(default_factory=dict)
    judges: list[JudgeCorrection] = field(default_factory=list)


async def label_sources(
    conn: AsyncConnection, segment: Segment, start: datetime, end: datetime
) -> list[tuple[str, str, int]]:
    """``(agent, label_source, labelled items)`` in ``[start, end)``, by agent and source: the
    window's whole UTC hours from ``label_hours``, the rest from ``items`` (exact either way;
    ``label_hours`` is kept by :mod:`monitor.ingest.label_sql`)."""
    cond, params = segment.where()
    p: dict[str, Any] = {"lo": start, "hi": end, **params}
    items = (
        f"SELECT agent_id, coalesce(label_source, '') AS label_source, 1 AS n FROM items"
        f" WHERE label IS NOT NULL AND {cond}"
    )
    hours = whole_hours(start, end)
    if hours is None:
        rows = f"{items} AND ts >= :lo AND ts < :hi"
    else:
        p["a"], p["b"] = hours
        rows = (
            f"SELECT agent_id, label_source, items AS n FROM label_hours"
            f" WHERE hour >= :a AND hour < :b AND {cond}"
            f" UNION ALL {items} AND (ts >= :lo AND ts < :a OR ts >= :b AND ts < :hi)"
        )
    result = await conn.execute(
        text(
            f"SELECT agent_id, label_source, sum(n) FROM ({rows}) AS t"
            " GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 1, 2"
        ),
        p,
    )
    out: list[Any] = list(result.all())
    return [(str(a), str(s), int(n)) for a, s, n in out]


async def judge_labels(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> dict[str, JudgeLabels]:
    """Per agent with at least one judge-labelled item in ``[start, end)`` (see module doc)."""
    async with engine.connect() as conn:
        sources = await label_sources(conn, segment, start, end)
        vcond, vparams = Segment(segment.agent).where("v.")
        judged: list[Any] = list(
            (
                await conn.execute(
                    text(
                        "SELECT v.agent_id, v.judge, v.judge_version,"
                        " count(DISTINCT v.conversation_id),"
                        " count(DISTINCT v.conversation_id) FILTER (WHERE v.label = 0)"
                        " FROM verdicts v JOIN conversations c USING (conversation_id)"
                        " WHERE v.status = 'ok' AND v.label IS NOT NULL"
                        " AND c.outcome_success IS NULL"
                        f" AND v.created_at >= :lo AND v.created_at < :hi AND {vcond}"
                        " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
                    ),
                    {"lo": start, "hi": end, **vparams},
                )
            ).all()
        )
    quality = {
        q.key: q
        for q in judge_quality(await conversation_judgements(engine, segment, start, end))
        if q.category is None
    }
    per_agent: dict[str, dict[str, int]] = {}
    for agent, source, n in sources:
        per_agent.setdefault(str(agent), {})[str(source)] = int(n)
    out: dict[str, JudgeLabels] = {}
    for agent, counts in per_agent.items():
        by_judge = sum(n for s, n in counts.items() if s.startswith("judge:"))
        if not by_judge:
            continue
        total = sum(counts.values())
        corrections = []
        for a, judge, version, n_judged, n_flagged in judged:
            if a != agent:
                continue
            q = quality.get((str(judge), str(version)))
            acc = (
                corrected_accuracy(
                    1 - int(n_flagged) / int(n_judged), q.recall.value, q.specificity.value
                )
                if q is not None
                else None
            )
            corrections.append(
                JudgeCorrection(str(judge), str(version), q, int(n_judged), int(n_flagged), acc)
            )
        out[agent] = JudgeLabels(total, by_judge, by_judge / total, counts, corrections)
    return out
