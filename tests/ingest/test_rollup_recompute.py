"""Every column of the ``conversations`` roll-up equals a recomputation from ``events``.

The roll-up is maintained incrementally by the batch statement (``monitor.ingest.rollup_sql``);
here it is recomputed in Python from the stored events alone, with the merge rules written
out independently (earliest escalation, best outcome by source rank then latest ts, latest
assistant confidence, counts over every stored event). The store is filled through the real
``EventWriter`` with simulated traffic in shuffled batches of varying size, with replayed
batches, in-batch duplicates (same event twice in one batch) and outcomes held back to the end,
so every merge path runs: new conversation, update across batches, out-of-order events,
duplicates that must not count twice.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.sim.traffic import Simulator
from monitor.store.engine import libpq_url

RANK = {"ground_truth": 3, "human_review": 1}


def recompute(events: list[asyncpg.Record]) -> dict[str, Any]:
    """The roll-up of one conversation from its stored events (independent of the SQL)."""
    by_ts = sorted(events, key=lambda e: e["ts"])
    assistant = [e for e in by_ts if e["type"] == "message" and e["role"] == "assistant"]
    with_conf = [e for e in assistant if e["confidence"] is not None]
    esc = [e for e in by_ts if e["type"] == "escalation"]
    outs = [e for e in by_ts if e["type"] == "outcome"]

    def body(e: asyncpg.Record) -> dict[str, Any]:
        return dict(json.loads(e["body"]))

    best = max(
        outs, default=None, key=lambda e: (RANK.get(body(e)["outcome"].get("source"), 2), e["ts"])
    )
    out = body(best)["outcome"] if best is not None else {}
    tool_calls = sum(
        len(body(e)["message"].get("tool_calls") or []) for e in by_ts if e["type"] == "message"
    )
    return {
        "event_count": len(by_ts),
        "first_ts": by_ts[0]["ts"],
        "last_ts": by_ts[-1]["ts"],
        "message_count": sum(e["type"] == "message" for e in by_ts),
        "assistant_messages": len(assistant),
        "user_messages": sum(e["type"] == "message" and e["role"] == "user" for e in by_ts),
        "tool_calls": tool_calls,
        "tool_results": sum(e["type"] == "tool_result" for e in by_ts),
        "tool_errors": sum(e["type"] == "tool_result" and e["tool_ok"] is False for e in by_ts),
        "feedback_count": sum(e["type"] == "feedback" for e in by_ts),
        "min_confidence": min((e["confidence"] for e in with_conf), default=None),
        "last_confidence": with_conf[-1]["confidence"] if with_conf else None,
        "last_confidence_ts": with_conf[-1]["ts"] if with_conf else None,
        "first_turn": min((e["turn"] for e in by_ts if e["turn"] is not None), default=None),
        "escalated": bool(esc),
        "escalated_at": esc[0]["ts"] if esc else None,
        "escalation_turn": esc[0]["turn"] if esc else None,
        "escalation_trigger": body(esc[0])["escalation"].get("trigger") if esc else None,
        "outcome_success": out.get("success"),
        "outcome_reward": out.get("reward"),
        "outcome_source": out.get("source"),
        "outcome_at": best["ts"] if best is not None else None,
        "agent_id": by_ts[0]["agent_id"],
        "domain": next((e["domain"] for e in by_ts if e["domain"] is not None), None),
        "tier": next((e["tier"] for e in by_ts if e["tier"] is not None), None),
    }


async def test_every_conversation_column_equals_recomputation(database_url: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    sim = Simulator(seed=11, start=now - timedelta(hours=2), interval=timedelta(seconds=20))
    events = [e for e in sim.events(300) if e.ts <= now]
    outcomes = [e for e in events if e.type == "outcome"]
    rest = [e for e in events if e.type != "outcome"]
    # second escalations (later, another trigger) and competing outcomes of lower and equal
    # rank (later ts), so the earliest-escalation and best-outcome rules decide something
    for n, e in enumerate(x for x in events if x.type == "escalation" and x.escalation):
        if n % 2 == 0:
            assert e.escalation is not None
            rest.append(
                e.model_copy(
                    update={
                        "event_id": e.event_id + "-esc2",
                        "ts": e.ts + timedelta(seconds=5),
                        "turn": (e.turn or 0) + 1,
                        "escalation": e.escalation.model_copy(update={"trigger": "policy"}),
                    }
                )
            )
    for n, e in enumerate(list(outcomes)):
        assert e.outcome is not None
        source = ("human_review", "csat", "ground_truth")[n % 3]
        outcomes.insert(
            0,
            e.model_copy(
                update={
                    "event_id": e.event_id + "-out2",
                    "ts": e.ts + timedelta(seconds=n % 2 * 2 - 1),
                    "outcome": e.outcome.model_copy(
                        update={"source": source, "success": not e.outcome.success}
                    ),
                }
            ),
        )
    rng = random.Random(5)
    rng.shuffle(rest)
    writer = EventWriter(database_url)
    try:
        i = 0
        while i < len(rest):
            size = rng.choice((1, 7, 60, 250))
            batch = rest[i : i + size]
            rows = [event_row(e) for e in batch]
            if size == 60:
                rows.append(rows[0])  # the same event twice in one batch
            await writer.write(rows)
            if rng.random() < 0.2:
                assert (await writer.write(rows)).inserted == 0  # a replayed batch
            i += size
        await writer.write([event_row(e) for e in outcomes[::2]])
        await writer.write([event_row(e) for e in outcomes])  # half of it replayed
    finally:
        await writer.close()
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        stored: dict[str, list[asyncpg.Record]] = defaultdict(list)
        for e in await conn.fetch("SELECT * FROM events"):
            stored[e["conversation_id"]].append(e)
        convs = {r["conversation_id"]: r for r in await conn.fetch("SELECT * FROM conversations")}
    finally:
        await conn.close()
    assert len(stored) == len({e.conversation_id for e in events}) > 50
    assert set(convs) == set(stored)
    escalated = outcome = 0
    for cid, evs in stored.items():
        want = recompute(evs)
        got = {k: convs[cid][k] for k in want}
        assert got == want, cid
        escalated += bool(want["escalated"])
        outcome += want["outcome_source"] is not None
    assert escalated >= 5 and outcome >= 20  # the escalation and outcome merges are compared
