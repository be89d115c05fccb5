"""The rows gate effectiveness is computed from (queries; :mod:`monitor.gate.effect` computes).

Recorded: each conversation's latest ``gate`` decision event in the range (by ``ts``), with the
conversation's outcome from the ``conversations`` roll-up; source ``shadow`` when that decision
was not enforced (a shadow rule's), else ``recorded``. Replayed: conversations that started
in the range, have a recorded minimum assistant confidence and no decision event: that
confidence (through the agent x domain map when one is stored) against the policy rule's
threshold (for an advisor rule, the cut the advisor gives at the end of the range, as the gate
would compute it then; its ``fallback`` without enough data).
Conversations no policy rule covers are left out. Ungated (:func:`ungated_counts`): per gated
agent (one with a decision event in the range) x domain, its conversations that started in the
range without any decision event, counted with their outcomes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.gate.advised import advised_threshold
from monitor.gate.decide import lookup_map
from monitor.gate.effect import GatedConversation, UngatedCounts, replayed_decision
from monitor.gate.policy import GatePolicy
from monitor.gate.state import advisor_cuts, load_maps

_RECORDED = text("""
SELECT DISTINCT ON (g.conversation_id) g.agent_id, coalesce(g.domain, '') AS domain,
       g.body->'gate'->>'decision' AS decision, c.outcome_success,
       coalesce(CAST(g.body->'gate'->>'enforced' AS boolean), true) AS enforced
FROM events g LEFT JOIN conversations c ON c.conversation_id = g.conversation_id
WHERE g.type = 'gate' AND g.ts >= :lo AND g.ts < :hi
  AND (CAST(:agent AS text) IS NULL OR g.agent_id = :agent)
ORDER BY g.conversation_id, g.ts DESC, g.event_id DESC
""")

_REPLAYED = text("""
SELECT c.agent_id, c.domain, c.tier, c.min_confidence, c.outcome_success
FROM conversations c
WHERE c.first_ts >= :lo AND c.first_ts < :hi AND c.min_confidence IS NOT NULL
  AND (CAST(:agent AS text) IS NULL OR c.agent_id = :agent)
  AND NOT EXISTS (SELECT 1 FROM events g WHERE g.type = 'gate'
                  AND g.conversation_id = c.conversation_id)
""")

_UNGATED = text("""
SELECT c.agent_id, coalesce(c.domain, '') AS domain, count(*), count(c.outcome_success),
       count(*) FILTER (WHERE c.outcome_success = false)
FROM conversations c
WHERE c.first_ts >= :lo AND c.first_ts < :hi
  AND (CAST(:agent AS text) IS NULL OR c.agent_id = :agent)
  AND c.agent_id IN (SELECT g.agent_id FROM events g
                     WHERE g.type = 'gate' AND g.ts >= :lo AND g.ts < :hi)
  AND NOT EXISTS (SELECT 1 FROM events g WHERE g.type = 'gate'
                  AND g.conversation_id = c.conversation_id)
GROUP BY 1, 2
""")


async def ungated_counts(
    engine: AsyncEngine, start: datetime, end: datetime, agent: str | None = None
) -> list[UngatedCounts]:
    """The ungated baseline's counts per gated agent x domain (module docstring)."""
    async with engine.connect() as conn:
        rows: list[Any] = list(
            (await conn.execute(_UNGATED, {"lo": start, "hi": end, "agent": agent})).all()
        )
    return [UngatedCounts(a, d, int(n), int(k), int(f)) for a, d, n, k, f in rows]


async def gated_conversations(
    engine: AsyncEngine,
    policy: GatePolicy,
    start: datetime,
    end: datetime,
    agent: str | None = None,
    replay: bool = True,
) -> list[GatedConversation]:
    """Recorded decisions and (with ``replay``) replayed ones, one row per conversation."""
    params = {"lo": start, "hi": end, "agent": agent}
    async with engine.connect() as conn:
        recorded: list[Any] = list((await conn.execute(_RECORDED, params)).all())
        replayable: list[Any] = (
            list((await conn.execute(_REPLAYED, params)).all()) if replay else []
        )
    out = [
        GatedConversation(r[0], r[1], r[2], r[3], "recorded" if r[4] else "shadow")
        for r in recorded
    ]
    if not replayable:
        return out
    maps = await load_maps(engine)
    uses_advisor = any(r.advisor is not None for r in policy.rules)
    cuts = await advisor_cuts(engine, policy, maps, end) if uses_advisor else None
    for agent_id, domain, tier, min_conf, success in replayable:
        found = next(
            ((i, r) for i, r in enumerate(policy.rules) if r.matches(agent_id, domain, tier)), None
        )
        if found is None:
            continue
        index, rule = found
        threshold = rule.fixed_threshold
        if rule.advisor is not None:
            threshold = advised_threshold(cuts, index, rule, agent_id, domain)[0]
        entry = lookup_map(maps, agent_id, domain)
        calibrated = min_conf if entry is None else entry.map.apply_one(min_conf)
        out.append(
            GatedConversation(
                agent_id,
                domain or "",
                replayed_decision(calibrated, threshold),
                success,
                "replayed",
            )
        )
    return out
