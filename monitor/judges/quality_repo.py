"""The judge precision floor in the store: measure every judge, mute or unmute, relabel.

:func:`refresh_judge_quality` (run by the worker's judge scheduler every
``judge_quality_interval_s``) measures each judge against conversation outcomes over all stored
verdicts (:func:`monitor.judges.quality.judge_quality`), upserts ``judge_quality`` and,
for every judge whose ``muted`` state changed, relabels the items of the conversations it has
verdicts on (the labelling SQL skips muted judges), in one transaction under the
per-conversation locks the ingest and verdict writers take. Running it again without new
verdicts or outcomes changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from monitor.ingest.items_sql import LOCK_CONVERSATIONS, RELABEL_ITEMS
from monitor.judges.quality import ConversationJudgement, JudgeQuality, judge_quality

_JUDGEMENTS = """
SELECT v.judge, v.judge_version, v.conversation_id, bool_or(v.label = 0) AS flagged,
       string_agg(DISTINCT cat.c, ',') FILTER (WHERE v.label = 0) AS cats,
       bool_and(c.outcome_success) AS ok
FROM verdicts v JOIN conversations c USING (conversation_id)
LEFT JOIN LATERAL jsonb_array_elements_text(v.categories) AS cat(c) ON TRUE
WHERE v.status = 'ok' AND v.label IS NOT NULL AND c.outcome_success IS NOT NULL
GROUP BY 1, 2, 3
"""

_UPSERT = """
INSERT INTO judge_quality AS q (judge, judge_version, pairs, flagged, precision, recall, floor,
                                min_pairs, muted, computed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now())
ON CONFLICT (judge, judge_version) DO UPDATE SET
  pairs = EXCLUDED.pairs, flagged = EXCLUDED.flagged, precision = EXCLUDED.precision,
  recall = EXCLUDED.recall, floor = EXCLUDED.floor, min_pairs = EXCLUDED.min_pairs,
  muted = EXCLUDED.muted, computed_at = EXCLUDED.computed_at
"""


@dataclass(frozen=True)
class FloorChange:
    """A judge whose muted state changed, and how many items were relabelled."""

    judge: str
    judge_version: str
    muted: bool
    relabelled: int


async def refresh_judge_quality(
    pool: asyncpg.Pool, floor: float, min_pairs: int
) -> tuple[list[JudgeQuality], list[FloorChange]]:
    """Measure every judge, store the measurement, apply mute changes (module docstring)."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(_JUDGEMENTS)
    judgements = [
        ConversationJudgement(
            r["conversation_id"],
            r["judge"],
            r["judge_version"],
            bool(r["flagged"]),
            frozenset(r["cats"].split(",")) if r["cats"] else frozenset(),
            not r["ok"],
        )
        for r in rows
    ]
    quality = [
        q
        for q in judge_quality(judgements, floor, min_pairs)
        if q.category is None and q.judge_version
    ]
    changes: list[FloorChange] = []
    async with pool.acquire() as conn, conn.transaction():
        stored = await conn.fetch("SELECT judge, judge_version, muted FROM judge_quality")
        before = {(r["judge"], r["judge_version"]): r["muted"] for r in stored}
        for q in quality:
            await conn.execute(
                _UPSERT,
                q.judge,
                q.judge_version,
                q.pairs,
                q.precision.n,
                q.precision.value,
                q.recall.value,
                floor,
                min_pairs,
                q.below_floor,
            )
            if before.get(q.key, False) != q.below_floor:
                cids = [
                    r["conversation_id"]
                    for r in await conn.fetch(
                        "SELECT DISTINCT conversation_id FROM verdicts WHERE judge = $1"
                        " AND judge_version = $2 ORDER BY 1",
                        q.judge,
                        q.judge_version,
                    )
                ]
                await conn.execute(LOCK_CONVERSATIONS, cids)
                row = await conn.fetchrow(RELABEL_ITEMS, cids, cids)
                relabelled = int(row["relabelled"]) if row is not None else 0
                changes.append(FloorChange(q.judge, q.judge_version, q.below_floor, relabelled))
    return quality, changes
