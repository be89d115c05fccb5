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
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.repo import Segment
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


async def judge_labels(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> dict[str, JudgeLabels]:
    """Per agent with at least one judge-labelled item in ``[start, end)`` (see module doc)."""
    cond, params = segment.where("i.")
    p = {"lo": start, "hi": end, **params}
    async with engine.connect() as conn:
        sources: list[Any] = list((await conn.execute(text(
            "SELECT i.agent_id, i.label_source, count(*) FROM items i WHERE i.label IS NOT NULL"
            f" AND i.ts >= :lo AND i.ts < :hi AND {cond} GROUP BY 1, 2 ORDER BY 1, 2"),
            p)).all())  # fmt: skip
        vcond, vparams = Segment(segment.agent).where("v.")
        judged: list[Any] = list((await conn.execute(text(
            "SELECT v.agent_id, v.judge, v.judge_version, count(DISTINCT v.conversation_id),"
            " count(DISTINCT v.conversation_id) FILTER (WHERE v.label = 0)"
            " FROM verdicts v JOIN conversations c USING (conversation_id)"
            " WHERE v.status = 'ok' AND v.label IS NOT NULL AND c.outcome_success IS NULL"
            f" AND v.created_at >= :lo AND v.created_at < :hi AND {vcond}"
            " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"), {"lo": start, "hi": end, **vparams})).all())
    quality = {q.key: q for q in judge_quality(
        await conversation_judgements(engine, segment, start, end)) if q.category is None}
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
            acc = (corrected_accuracy(1 - int(n_flagged) / int(n_judged), q.recall.value,
                                      q.specificity.value) if q is not None else None)
            corrections.append(JudgeCorrection(str(judge), str(version), q, int(n_judged),
                                               int(n_flagged), acc))  # fmt: skip
        out[agent] = JudgeLabels(total, by_judge, by_judge / total, counts, corrections)
    return out
