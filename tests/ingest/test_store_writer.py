"""The batch writer against real Postgres: idempotence and roll-up merge rules."""

from __future__ import annotations

import asyncpg
import pytest

from monitor.ingest.rows import DeadLetter, event_row
from monitor.ingest.writer import EventWriter
from monitor.store.engine import libpq_url
from tests.factories import event


async def fetch_conv(database_url: str, cid: str) -> asyncpg.Record:
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        row = await conn.fetchrow("SELECT * FROM conversations WHERE conversation_id = $1", cid)
        assert row is not None
        return row
    finally:
        await conn.close()


def conversation() -> list:
    return [
        event("e1", at=0, role="user", content="hi", confidence=None, turn=0),
        event(
            "e2",
            at=1,
            confidence=0.9,
            turn=1,
            tool_calls=[
                {"id": "k1", "name": "lookup", "arguments": {"q": 1}},
                {"id": "k2", "name": "refund", "arguments": {}},
            ],
        ),
        event("e3", "c1", "tool_result", at=2, ok=False, error="boom", turn=2),
        event("e4", at=3, confidence=0.4, turn=3),
        event("e5", "c1", "escalation", at=4, turn=4, trigger="threshold"),
        event("e6", at=5, confidence=0.7, turn=5),
    ]


async def test_rollup_from_one_batch_and_replay_is_noop(writer: EventWriter, database_url: str):
    rows = [event_row(e) for e in conversation()]
    first = await writer.write(rows)
    assert (first.inserted, first.duplicates, first.conversations) == (6, 0, 1)
    again = await writer.write(rows)
    assert (again.inserted, again.duplicates, again.conversations) == (0, 6, 0)
    c = await fetch_conv(database_url, "c1")
    assert c["event_count"] == 6
    assert c["message_count"] == 4 and c["assistant_messages"] == 3 and c["user_messages"] == 1
    assert c["tool_calls"] == 2 and c["tool_results"] == 1 and c["tool_errors"] == 1
    assert c["min_confidence"] == pytest.approx(0.4)
    assert c["last_confidence"] == pytest.approx(0.7)
    assert c["escalated"] is True and c["escalation_turn"] == 4
    assert c["escalation_trigger"] == "threshold"
    assert c["outcome_success"] is None
    assert (c["domain"], c["tier"], c["agent_id"]) == ("retail", 2, "agent-a")


async def test_rollup_is_order_independent_across_batches(writer: EventWriter, database_url: str):
    evs = conversation()
    # later events first, one per batch, and a duplicate in between
    for e in reversed(evs):
        await writer.write([event_row(e)])
    await writer.write([event_row(evs[3])])
    c = await fetch_conv(database_url, "c1")
    assert c["event_count"] == 6
    assert c["min_confidence"] == pytest.approx(0.4)
    assert c["last_confidence"] == pytest.approx(0.7)
    assert c["escalation_turn"] == 4
    assert c["first_ts"] < c["last_ts"]


async def test_late_outcome_updates_row_and_ground_truth_wins(
    writer: EventWriter, database_url: str
):
    await writer.write([event_row(e) for e in conversation()])
    await writer.write(
        [event_row(event("o1", "c1", "outcome", at=100, success=False, reward=None, source="csat"))]
    )
    c = await fetch_conv(database_url, "c1")
    assert (c["outcome_success"], c["outcome_source"]) == (False, "csat")
    await writer.write(
        [
            event_row(
                event(
                    "o2", "c1", "outcome", at=200, success=True, reward=1.0, source="ground_truth"
                )
            )
        ]
    )
    # an even later non-ground-truth outcome does not override ground truth
    await writer.write(
        [
            event_row(
                event("o3", "c1", "outcome", at=300, success=False, reward=0.0, source="ticket")
            )
        ]
    )
    c = await fetch_conv(database_url, "c1")
    assert (c["outcome_success"], c["outcome_reward"], c["outcome_source"]) == (
        True,
        1.0,
        "ground_truth",
    )
    assert c["event_count"] == 9


async def test_dead_letters_are_idempotent_per_source_offset(
    writer: EventWriter, database_url: str
):
    dl = DeadLetter("agent-events", 0, 17, "not_json", None, "bad", b"\xff")
    await writer.write([], [dl])
    await writer.write([], [dl])
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        rows = await conn.fetch("SELECT reason, raw FROM dead_letters")
    finally:
        await conn.close()
    assert [(r["reason"], bytes(r["raw"])) for r in rows] == [("not_json", b"\xff")]


async def test_dead_letter_at_a_reused_offset_is_kept(writer: EventWriter, database_url: str):
    """A recreated topic (or a restarted in-memory broker) reuses offsets: keep both records."""
    await writer.write([], [DeadLetter("agent-events", 0, 0, "not_json", None, "bad", b"a")])
    await writer.write([], [DeadLetter("agent-events", 0, 0, "not_json", None, "bad", b"b")])
    await writer.write([], [DeadLetter("agent-events", 0, 0, "not_json", None, "bad", b"b")])
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        raws = sorted(bytes(r["raw"]) for r in await conn.fetch("SELECT raw FROM dead_letters"))
    finally:
        await conn.close()
    assert raws == [b"a", b"b"]


async def test_outcome_ranks_ground_truth_then_outcomes_then_human_review(
    writer: EventWriter, database_url: str
):
    """Labels rank outcome > human review (> judges, which label items elsewhere)."""
    await writer.write([event_row(e) for e in conversation()])

    async def outcome(eid: str, at: float, ok: bool, source: str) -> tuple:
        await writer.write(
            [event_row(event(eid, "c1", "outcome", at=at, success=ok, reward=None, source=source))]
        )
        c = await fetch_conv(database_url, "c1")
        return c["outcome_success"], c["outcome_source"]

    assert await outcome("h1", 100, False, "human_review") == (False, "human_review")
    assert await outcome("t1", 110, True, "ticket") == (True, "ticket")
    # a later human review does not override an outcome
    assert await outcome("h2", 120, False, "human_review") == (True, "ticket")
    # a later outcome of the same rank does
    assert await outcome("c1o", 130, False, "csat") == (False, "csat")
    assert await outcome("g1", 140, True, "ground_truth") == (True, "ground_truth")
    assert await outcome("t2", 150, False, "ticket") == (True, "ground_truth")


def test_copy_columns_are_the_events_table_in_order() -> None:
    """``rows.EVENT_COLUMNS`` is spelled out (the row module stays pure): it must stay every
    ``events`` column but the server-filled ``ingested_at``, in the table's order."""
    from monitor.ingest.rows import EVENT_COLUMNS
    from monitor.store.tables import events

    # kept: chosen by the writer for the batch (monitor.ingest.decisions.kept_conversations)
    stored = tuple(c.name for c in events.c if c.name not in ("ingested_at", "kept"))
    assert stored == EVENT_COLUMNS


async def test_segment_columns_take_the_first_value_by_ts_when_a_batch_mixes_them(
    writer: EventWriter, database_url: str
) -> None:
    # one batch, events out of ts order: the earliest event's value wins (the earliest non-null
    # for the segment columns but agent_id), whatever order or sort order the values have
    rows = [
        event(
            "m2",
            "mix",
            at=2,
            agent="agent-a",
            context={"domain": "airline", "channel": "chat", "tier": 1},
        ),
        event("m0", "mix", at=0, agent="agent-z", context={"channel": "web"}),
        event("m1", "mix", at=1, agent="agent-a", context={"domain": "retail", "tier": 3}),
        event("s0", "same", at=0, context={"domain": "telecom", "channel": "voice"}),
        event("s1", "same", at=1, context={"domain": "telecom"}),
        event("x0", "esc", "escalation", at=3, turn=7, trigger="policy"),
        event("x1", "esc", "escalation", at=1, turn=4, trigger="threshold"),
    ]
    await writer.write([event_row(e) for e in rows])
    mix = await fetch_conv(database_url, "mix")
    assert (mix["agent_id"], mix["domain"], mix["channel"], mix["tier"]) == (
        "agent-z",
        "retail",
        "web",
        3,
    )
    same = await fetch_conv(database_url, "same")
    assert (same["domain"], same["channel"], same["tier"]) == ("telecom", "voice", None)
    esc = await fetch_conv(database_url, "esc")
    assert (esc["escalation_turn"], esc["escalation_trigger"]) == (4, "threshold")
