"""The rows gate effectiveness is computed from (queries; :mod:`monitor.gate.effect` computes).

Recorded: each conversation's latest ``gate`` decision event in the range (by ``ts``), with the
conversation's outcome from the ``conversations`` roll-up. Replayed: conversations that started
in the range, have a recorded minimum assistant confidence and no decision event: that
confidence (through the agent x domain map when one is stored) against the policy rule's
threshold. Conversations no policy rule covers are left out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.gate.decide import lookup_map
from monitor.gate.effect import GatedConversation, replayed_decision
from monitor.gate.policy import GatePolicy
from monitor.gate.state import load_maps

_RECORDED = text("""
SELECT DISTINCT ON (g.conversation_id) g.agent_id, coalesce(g.domain, '') AS domain,
       g.body->'gate'->>'decision' AS decision, c.outcome_success
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
    out = [GatedConversation(r[0], r[1], r[2], r[3]) for r in recorded]
    if not replayable:
        return out
    maps = await load_maps(engine)
    for agent_id, domain, tier, min_conf, success in replayable:
        rule = policy.rule_for(agent_id, domain, tier)
        if rule is None:
            continue
        entry = lookup_map(maps, agent_id, domain)
        calibrated = min_conf if entry is None else entry.map.apply_one(min_conf)
        out.append(GatedConversation(agent_id, domain or "", replayed_decision(
            calibrated, rule.threshold), success, "replayed"))  # fmt: skip
    return out
