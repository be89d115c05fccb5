"""An outcome or feedback event of another agent cannot rewrite a conversation's truth: it is
dead-lettered (``agent_mismatch``) by the batch write, on the direct and the staging path, and
the conversation's outcome, items and calibration sums stay as they were (real Postgres)."""

from __future__ import annotations

import pytest

from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from tests.db import fetch
from tests.factories import event


@pytest.mark.parametrize("direct", [True, False])
async def test_other_agents_truth_is_dead_lettered(database_url: str, direct: bool) -> None:
    writer = EventWriter(database_url, direct=direct)
    own = [event(f"m{i}", "c1", "message", at=i, confidence=0.9, agent="a") for i in range(3)]
    own.append(event("o1", "c1", "outcome", at=5, success=True, agent="a"))
    forged = [
        event("x-o", "c1", "outcome", at=60, success=False, agent="b"),  # later: would win
        event("x-f", "c1", "feedback", at=61, score=-1.0, agent="b"),
        # a conversation the batch creates: its agent is the one of its messages
        event("x-new", "c2", "outcome", at=0, success=False, agent="b"),
        event("m-new", "c2", "message", at=1, confidence=0.4, agent="a"),
        event("f-own", "c1", "feedback", at=62, score=0.5, agent="a"),  # its own: stored
    ]
    try:
        await writer.write([event_row(e) for e in own], source="t")
        before = await fetch(
            database_url, "SELECT bin, sum_y, weight FROM calibration_bins ORDER BY 1, 2, 3"
        )
        result = await writer.write([event_row(e) for e in forged], source="t")
        assert result.mismatched == 3 and result.inserted == 2, result
        again = await writer.write([event_row(e) for e in forged], source="t")  # re-delivery
        assert again.inserted == 0 and again.mismatched == 0
    finally:
        await writer.close()
    conv = {
        r["conversation_id"]: r
        for r in await fetch(
            database_url,
            "SELECT conversation_id, agent_id, outcome_success, feedback_count FROM conversations",
        )
    }
    assert conv["c1"]["outcome_success"] is True and conv["c1"]["feedback_count"] == 1
    assert conv["c2"]["agent_id"] == "a" and conv["c2"]["outcome_success"] is None
    labels = await fetch(
        database_url, "SELECT DISTINCT label FROM items WHERE conversation_id = 'c1'"
    )
    assert [r["label"] for r in labels] == [1]
    after = await fetch(
        database_url, "SELECT bin, sum_y, weight FROM calibration_bins ORDER BY 1, 2, 3"
    )
    assert before and [tuple(r) for r in after] == [tuple(r) for r in before]
    stored = await fetch(database_url, "SELECT event_id FROM events ORDER BY 1")
    assert [r["event_id"] for r in stored] == ["f-own", "m-new", "m0", "m1", "m2", "o1"]
    dead = await fetch(database_url, "SELECT reason, field, detail, source, raw FROM dead_letters")
    assert sorted(r["reason"] for r in dead) == ["agent_mismatch"] * 3
    assert {r["field"] for r in dead} == {"agent.id"} and {r["source"] for r in dead} == {"t"}
    assert any("conversation c1 belongs to agent a, not b" in r["detail"] for r in dead)
    assert any(b'"x-o"' in bytes(r["raw"]) for r in dead)


@pytest.mark.parametrize("direct", [True, False])
async def test_a_handoff_message_does_not_take_the_conversation(
    database_url: str, direct: bool
) -> None:
    """The conversation's agent is the one of its earliest event by ts: another agent's later
    message (a handoff) arriving first, in an earlier batch or the same one, neither refuses
    the own agent's outcome nor lets the other agent's through."""
    writer = EventWriter(database_url, direct=direct)
    try:
        # h1: the handoff message is stored first (its row names agent b for now)
        first = await writer.write([event_row(event("h1-b", "h1", at=10, agent="b"))])
        assert first.inserted == 1
        later = [
            event("h1-a", "h1", at=0, confidence=0.8, agent="a"),
            event("h1-o", "h1", "outcome", at=20, success=True, agent="a"),
            # h2: one batch holds the opening, the handoff and both agents' outcomes
            event("h2-o", "h2", "outcome", at=20, success=True, agent="a"),
            event("h2-b", "h2", at=10, agent="b"),
            event("h2-a", "h2", at=0, confidence=0.8, agent="a"),
            event("h2-x", "h2", "outcome", at=21, success=False, agent="b"),
        ]
        result = await writer.write([event_row(e) for e in later])
        assert result.inserted == 5 and result.mismatched == 1, result
        forged = event("h1-x", "h1", "feedback", at=30, score=-1.0, agent="b")
        result = await writer.write([event_row(forged)])
        assert result.inserted == 0 and result.mismatched == 1, result
    finally:
        await writer.close()
    conv = {
        r["conversation_id"]: (r["agent_id"], r["outcome_success"], r["feedback_count"])
        for r in await fetch(
            database_url,
            "SELECT conversation_id, agent_id, outcome_success, feedback_count FROM conversations",
        )
    }
    assert conv == {"h1": ("a", True, 0), "h2": ("a", True, 0)}
    labels = await fetch(
        database_url, "SELECT conversation_id, agent_id, label FROM items ORDER BY 1, 2"
    )
    want = [("h1", "a", 1), ("h1", "b", 1), ("h2", "a", 1), ("h2", "b", 1)]
    assert [tuple(r) for r in labels] == want
    dead = await fetch(database_url, "SELECT detail FROM dead_letters ORDER BY 1")
    assert [r["detail"].split(":")[0] for r in dead] == [
        "conversation h1 belongs to agent a, not b",
        "conversation h2 belongs to agent a, not b",
    ]
