"""Sampling decisions made in the batch statement (:mod:`monitor.ingest.decisions`).

The writer guesses each new conversation's segment from the batch and passes its decision to
the batch statement, which stores it only when the guess is the stored row's own segment. With
stratified rates (a wrong segment gives another rate), every stored decision must be the policy's
decision for the stored row's (agent, domain, tier), whatever the guess, and every conversation
is decided exactly once.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from monitor.ingest.decisions import provisional
from monitor.ingest.rollup_sql import CREATE_STAGING, STAGING_TABLE, WRITE_BATCH
from monitor.ingest.rows import EVENT_COLUMNS, event_row
from monitor.ingest.writer import EventWriter
from monitor.sampling.policy import SamplingPolicy, hash_unit
from monitor.store.engine import libpq_url
from monitor.store.partitions import ENSURE_DAYS, days_of
from tests.factories import event

POLICY = SamplingPolicy.from_mapping(
    {
        "default_rate": 0.5,
        "salt": "d1",
        "strata": [
            {"agent": "*", "domain": "airline", "rate": 0.25},
            {"agent": "agent-b", "tier": 1, "rate": 0.125},
        ],
    }
)


def want(cid: str, agent: str, domain: str | None, tier: int | None) -> tuple[Any, ...]:
    s = POLICY.stratum_for(agent, domain, tier)
    hit = hash_unit(cid, POLICY.salt) < s.rate
    return (s.name, s.rate, hit, 1.0 / s.rate if hit else 0.0, POLICY.digest())


DECISION = (
    "SELECT conversation_id, agent_id, domain, tier, sample_stratum, sample_rate,"
    " sampled_by_rate, sample_weight, sample_policy FROM conversations"
)


async def stored(database_url: str) -> dict[str, asyncpg.Record]:
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        return {r["conversation_id"]: r for r in await conn.fetch(DECISION)}
    finally:
        await conn.close()


def batches() -> list[list[Any]]:
    """Conversations whose segment the guess gets right, late, or wrong."""
    b1, b2 = [], []
    for i in range(60):  # plain: agent, domain and tier on every event
        ctx = {"domain": ("airline", "retail")[i % 2], "tier": 1 + i % 3}
        b1 += [
            event(
                f"p{i}-{k}",
                f"plain-{i}",
                at=k,
                agent=("agent-a", "agent-b")[i % 3 == 0],
                context=ctx,
            )
            for k in range(3)
        ]
    # the first event has no domain: the domain of the earliest event that has one counts
    b1 += [
        event("late-0", "late", at=0, context={}),
        event("late-1", "late", at=2, context={"domain": "airline", "tier": 1}),
        event("late-2", "late", at=1, context={"domain": "retail"}),
    ]
    # two events at the same ts disagree on the domain: whichever the roll-up keeps, the
    # decision must be the one for what it kept
    b1 += [
        event("tie-0", "tie", at=5, context={"domain": "airline", "tier": 2}),
        event("tie-1", "tie", at=5, context={"domain": "retail", "tier": 2}),
    ]
    # a conversation continued in a second batch with another domain: decided once, in b1
    b1 += [event("cont-0", "cont", at=0, agent="agent-b", context={"tier": 1})]
    b2 += [event("cont-1", "cont", at=9, agent="agent-b", context={"domain": "airline"})]
    return [[event_row(e) for e in b] for b in (b1, b2)]


async def test_every_stored_decision_is_the_policys_for_the_stored_segment(
    database_url: str,
) -> None:
    w = EventWriter(database_url, policy=POLICY)
    try:
        b1, b2 = batches()
        r1 = await w.write(b1)
        r2 = await w.write(b2)
        assert (await w.write(b1)).decided == 0  # a replay decides nothing
    finally:
        await w.close()
    rows = await stored(database_url)
    assert len(rows) == 63 and r1.decided == 63 and r2.decided == 0
    for cid, r in rows.items():
        assert tuple(r)[4:] == want(cid, r["agent_id"], r["domain"], r["tier"]), cid
    assert rows["late"]["domain"] == "retail"  # earliest event with a domain (ts 1)
    assert rows["cont"]["domain"] == "airline"  # merged later, decision from the first batch
    assert tuple(rows["cont"])[4:] == want("cont", "agent-b", None, 1)
    rates = {r["sample_rate"] for r in rows.values()}
    assert rates == {0.5, 0.25, 0.125}  # every stratum met: a wrong segment would show


async def test_a_decision_made_from_another_segment_is_not_stored(database_url: str) -> None:
    """The statement itself, given one right and one wrong guess: the wrong one leaves the
    row undecided (the writer then decides it from the stored row)."""
    rows = [
        event_row(event("r-0", "right", context={"domain": "retail", "tier": 2})),
        event_row(event("w-0", "wrong", context={"domain": "retail", "tier": 2})),
    ]
    params = list(provisional(rows, POLICY))
    assert params[0] == ["right", "wrong"] and params[2] == ["retail", "retail"]
    params[2] = ["retail", "airline"]  # the guess for "wrong" names another domain
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        async with conn.transaction():
            await conn.fetchval(ENSURE_DAYS, days_of(r[EVENT_COLUMNS.index("ts")] for r in rows))
            await conn.execute(CREATE_STAGING)
            await conn.copy_records_to_table(
                STAGING_TABLE, records=rows, columns=list(EVENT_COLUMNS)
            )
            record = await conn.fetchrow(WRITE_BATCH, *params, POLICY.digest(), "t")
    finally:
        await conn.close()
    assert record is not None and record["decided"] == 1
    got = await stored(database_url)
    assert tuple(got["right"])[4:] == want("right", "agent-a", "retail", 2)
    assert tuple(got["wrong"])[4:] == (None,) * 5
    # the writer decides a row the statement left undecided, from the stored segment, in the
    # next batch that touches it
    w = EventWriter(database_url, policy=POLICY)
    try:
        later = await w.write([event_row(event("w-1", "wrong", at=9, context={}))])
    finally:
        await w.close()
    assert later.decided == 1
    assert tuple((await stored(database_url))["wrong"])[4:] == want("wrong", "agent-a", "retail", 2)
