"""The sampling decisions the writer passes to the batch statement (pure; no I/O).

A conversation's probability-sample decision is a function of its id and its segment
(``agent_id``, ``domain``, ``tier``) under the policy (:mod:`monitor.sampling.rules`). The
writer makes it before the batch statement, from the batch's own rows, for every conversation
of the batch, and the statement stores it only on a conversation row it *inserts* whose
segment equals the one the decision was made from
(:mod:`monitor.ingest.decision_sql`). So the stored decision is the one the
stored row's segment gives, whatever segment this module guessed: a wrong guess (events of one
conversation disagreeing on their segment, duplicates) only leaves the row undecided, and the
writer decides it afterwards from the stored row (:data:`monitor.ingest.items_sql.UNDECIDED`).
Deciding in the insert spares an update of every new conversation row (the decision step went
from 4.5 to 0.2 µs of Postgres CPU per event, 1.7 µs net; docs/benchmarks.md).

The guess follows the roll-up's merge rule for a new row (:mod:`monitor.ingest.rollup_sql`):
``agent_id`` of the earliest event, ``domain`` / ``tier`` of the earliest event that has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from monitor.ingest.rows import EVENT_COLUMNS, EventRow
from monitor.sampling.policy import SamplingPolicy, hash_unit

_CID, _TS, _AGENT, _DOMAIN, _TIER = (
    EVENT_COLUMNS.index(c) for c in ("conversation_id", "ts", "agent_id", "domain", "tier")
)

#: the statement's parameter arrays, in ``DECISION_PARAMS`` order: conversation ids, agent,
#: domain, tier the decision was made from, stratum, rate, by_rate, weight
Decisions = tuple[
    list[str], list[Any], list[Any], list[Any], list[str], list[float], list[bool], list[float]
]


def provisional(rows: Sequence[EventRow], policy: SamplingPolicy) -> Decisions:
    """One decision per conversation of ``rows``, in conversation id order (module docstring)."""
    first: dict[str, list[Any]] = {}  # cid -> [agent ts, agent, domain ts, domain, tier ts, tier]
    for r in rows:
        ts, cid = r[_TS], str(r[_CID])
        seen = first.get(cid)
        if seen is None:
            first[cid] = seen = [ts, r[_AGENT], None, None, None, None]
        elif ts < seen[0]:
            seen[0], seen[1] = ts, r[_AGENT]
        for at, col in ((2, _DOMAIN), (4, _TIER)):
            value = r[col]
            if value is not None and (seen[at] is None or ts < seen[at]):
                seen[at], seen[at + 1] = ts, value
    out: Decisions = ([], [], [], [], [], [], [], [])
    ids, agents, domains, tiers, strata, rates, by_rate, weights = out
    for cid in sorted(first):
        _, agent, _, domain, _, tier = first[cid]
        stratum = policy.stratum_for(agent, domain, tier)
        hit = hash_unit(cid, policy.salt) < stratum.rate
        ids.append(cid)
        agents.append(agent)
        domains.append(domain)
        tiers.append(tier)
        strata.append(stratum.name)
        rates.append(stratum.rate)
        by_rate.append(hit)
        weights.append(1.0 / stratum.rate if hit else 0.0)
    return out


_TYPE, _ROLE, _CONF, _OK = (
    EVENT_COLUMNS.index(c) for c in ("type", "role", "confidence", "tool_ok")
)


def kept_conversations(
    rows: Sequence[EventRow], decisions: Decisions, policy: SamplingPolicy
) -> set[str]:
    """The conversations of ``rows`` whose events go to the kept leaves: sampled by rate in
    ``decisions`` (:func:`provisional`), or with an event in ``rows`` that an enabled
    always-sample rule looks at (an escalation, a feedback, a failed tool result, an assistant
    confidence below the floor: the facts of :data:`monitor.ingest.decision_sql.PROMOTE`). The
    other conversations' events are stored unkept; :data:`~monitor.ingest.decision_sql.PROMOTE`
    moves them (and any earlier unkept event) when the stored conversation row is kept."""
    kept = {cid for cid, hit in zip(decisions[0], decisions[6], strict=True) if hit}
    rules = policy.always_sample
    floor = rules.confidence_floor
    for r in rows:
        kind = r[_TYPE]
        if (
            (kind == "escalation" and rules.escalation)
            or (kind == "feedback" and rules.negative_feedback_below is not None)
            or (kind == "tool_result" and r[_OK] is False and rules.failed_tool_call)
            or (
                floor is not None
                and kind == "message"
                and r[_ROLE] == "assistant"
                and r[_CONF] is not None
                and r[_CONF] < floor
            )
        ):
            kept.add(str(r[_CID]))
    return kept
