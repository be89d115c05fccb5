"""The judge precision floor in the store: measure every judge per scope, decide, relabel.

:func:`refresh_judge_quality` (run by the worker's judge scheduler every
``judge_quality_interval_s``) measures each judge against conversation outcomes over all stored
verdicts, per scope (the conversation's agent x domain) and pooled
(:func:`monitor.judges.quality.labelling`), and replaces the judge's rows of
``judge_quality``: a pooled row for every judge with verdicts (one without an outcome to
compare with labels nothing) and a row per scope it has outcomes in. For every scope whose
decision changed (a scope without a row follows the pooled row, as the labelling SQL reads
it), it relabels the items of that scope's conversations the judge has verdicts on, in one
transaction under the per-conversation locks the ingest and verdict writers take. Running it
again without new verdicts or outcomes changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from monitor.analytics.calibration import Proportion
from monitor.ingest.items_sql import LOCK_CONVERSATIONS, RELABEL_ITEMS
from monitor.judges.quality import POOLED, ScopeCounts, ScopeLabelling, labelling_of_counts

# per judge, version and scope, the counts labelling needs (monitor.judges.quality.ScopeCounts),
# summed here: one row per conversation would make the refresh's memory grow with every
# conversation ever judged
_COUNTS = """
SELECT judge, judge_version, agent_id, domain, count(*) AS pairs,
       count(*) FILTER (WHERE flagged) AS flagged, count(*) FILTER (WHERE NOT ok) AS failed,
       count(*) FILTER (WHERE flagged AND NOT ok) AS flagged_failed
FROM (
  SELECT v.judge, v.judge_version, bool_or(v.label = 0) AS flagged,
         bool_and(c.outcome_success) AS ok, min(c.agent_id) AS agent_id,
         coalesce(min(c.domain), '') AS domain
  FROM verdicts v JOIN conversations c USING (conversation_id)
  WHERE v.status = 'ok' AND v.label IS NOT NULL AND c.outcome_success IS NOT NULL
  GROUP BY v.judge, v.judge_version, v.conversation_id
) per_conversation
GROUP BY 1, 2, 3, 4
"""

_JUDGES = "SELECT judge, judge_version FROM verdicts GROUP BY 1, 2"

_UPSERT = """
INSERT INTO judge_quality AS q (judge, judge_version, agent_id, domain, pairs, flagged,
                                precision, precision_low, precision_high, recall, floor,
                                min_pairs, decided_by, labels, computed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, now())
ON CONFLICT (judge, judge_version, agent_id, domain) DO UPDATE SET
  pairs = EXCLUDED.pairs, flagged = EXCLUDED.flagged, precision = EXCLUDED.precision,
  precision_low = EXCLUDED.precision_low, precision_high = EXCLUDED.precision_high,
  recall = EXCLUDED.recall, floor = EXCLUDED.floor, min_pairs = EXCLUDED.min_pairs,
  decided_by = EXCLUDED.decided_by, labels = EXCLUDED.labels, computed_at = EXCLUDED.computed_at
"""

# the conversations a judge has verdicts on in the scopes $3 (agent_id, US, domain), or, when
# $4, in every scope that is not in $5
_CONVERSATIONS = """
SELECT DISTINCT v.conversation_id FROM verdicts v JOIN conversations c USING (conversation_id)
WHERE v.judge = $1 AND v.judge_version = $2
  AND (c.agent_id || chr(31) || coalesce(c.domain, '') = ANY($3::text[])
       OR ($4 AND NOT c.agent_id || chr(31) || coalesce(c.domain, '') = ANY($5::text[])))
ORDER BY 1
"""


@dataclass(frozen=True)
class FloorChange:
    """A judge whose labelling changed in one scope (``agent_id`` '' = the scopes that follow
    its pooled row), and how many items were relabelled; ``muted``: it stopped labelling."""

    judge: str
    judge_version: str
    muted: bool
    relabelled: int
    agent_id: str = POOLED
    domain: str = ""


async def refresh_judge_quality(
    pool: asyncpg.Pool, floor: float, min_pairs: int
) -> tuple[list[ScopeLabelling], list[FloorChange]]:
    """Measure every judge per scope, store the decisions, relabel what changed (module
    docstring); returns the decisions (pooled rows first per judge) and the changes."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(_COUNTS)
        judges = {(r["judge"], r["judge_version"]) for r in await conn.fetch(_JUDGES)}
    decisions = labelling_of_counts((ScopeCounts(**dict(r)) for r in rows), floor, min_pairs)
    none = Proportion.of(0, 0)
    measured = {d.key for d in decisions}
    decisions += [
        ScopeLabelling(j, v, POOLED, "", 0, none, none, "pooled", False)
        for j, v in sorted(judges - measured)
    ]
    by_judge: dict[tuple[str, str], list[ScopeLabelling]] = {}
    for d in decisions:
        by_judge.setdefault(d.key, []).append(d)
    changes: list[FloorChange] = []
    async with pool.acquire() as conn, conn.transaction():
        stored: dict[tuple[str, str], dict[tuple[str, str], bool]] = {}
        for r in await conn.fetch(
            "SELECT judge, judge_version, agent_id, domain, labels FROM judge_quality"
        ):
            stored.setdefault((r["judge"], r["judge_version"]), {})[
                (r["agent_id"], r["domain"])
            ] = r["labels"]
        for key, rows_of in by_judge.items():
            for d in rows_of:
                await conn.execute(
                    _UPSERT,
                    d.judge,
                    d.judge_version,
                    d.agent_id,
                    d.domain,
                    d.pairs,
                    d.precision.n,
                    d.precision.value,
                    d.precision.low,
                    d.precision.high,
                    d.recall.value,
                    floor,
                    min_pairs,
                    d.decided_by,
                    d.labels,
                )
            before = stored.get(key, {})
            after = {d.scope: d.labels for d in rows_of}
            gone = [s for s in before if s not in after]
            if gone:
                await conn.execute(
                    "DELETE FROM judge_quality WHERE judge = $1 AND judge_version = $2"
                    " AND agent_id || chr(31) || domain = ANY($3::text[])",
                    *key,
                    [_scope_key(s) for s in gone],
                )
            changes += await _relabel(conn, key, before, after)
    return decisions, changes


def _scope_key(scope: tuple[str, str]) -> str:
    return f"{scope[0]}\x1f{scope[1]}"


async def _relabel(
    conn: asyncpg.Connection,
    key: tuple[str, str],
    before: dict[tuple[str, str], bool],
    after: dict[tuple[str, str], bool],
) -> list[FloorChange]:
    """Relabel the conversations of every scope of judge ``key`` whose decision changed from
    ``before`` to ``after`` (stored rows by scope; the pooled row under ``(POOLED, "")``)."""
    pooled = (POOLED, "")
    was, now = before.get(pooled, False), after.get(pooled, False)
    explicit = sorted((set(before) | set(after)) - {pooled})
    out = []
    for scope in explicit:
        if before.get(scope, was) != after.get(scope, now):
            n = await _relabel_scopes(conn, key, [_scope_key(scope)], False, [])
            if n is not None:
                out.append(FloorChange(*key, not after.get(scope, now), n, *scope))
    if was != now:
        n = await _relabel_scopes(conn, key, [], True, [_scope_key(s) for s in explicit])
        if n is not None:
            out.append(FloorChange(*key, not now, n))
    return out


async def _relabel_scopes(
    conn: asyncpg.Connection,
    key: tuple[str, str],
    scopes: list[str],
    others: bool,
    explicit: list[str],
) -> int | None:
    """Relabel the judge's conversations of ``scopes`` (and, when ``others``, of every scope
    not in ``explicit``); the items relabelled, None when the judge has no such conversation."""
    found = await conn.fetch(_CONVERSATIONS, *key, scopes, others, explicit)
    cids = [r["conversation_id"] for r in found]
    if not cids:
        return None
    await conn.execute(LOCK_CONVERSATIONS, cids)
    row = await conn.fetchrow(RELABEL_ITEMS, cids, cids)
    return int(row["relabelled"]) if row is not None else 0
