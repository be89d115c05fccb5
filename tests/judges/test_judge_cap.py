"""The cap on events judged per conversation: a longer conversation is judged on its first and
last events only, the rest summarised (in memory, and by Postgres without loading it), and
every verdict states the cap."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import asyncpg
from typer.testing import CliRunner

from monitor.cli.main import app
from monitor.config import Settings
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.judges import repo as judge_repo
from monitor.judges.base import Conversation
from monitor.judges.det_base import VERSION as DET_VERSION
from monitor.judges.deterministic import (
    AuthorizationFabricationJudge,
    UnsupportedFigureJudge,
    deterministic_judges,
)
from monitor.judges.rubric import render_conversation
from monitor.judges.runner import JudgeRunner
from monitor.judges.truncation import DEFAULT_MAX_EVENTS, split, summarise
from monitor.store.engine import libpq_url
from tests.judges.long_conversation import long_conversation
from tests.judges.test_judges_deterministic import Conv


def test_split_keeps_the_head_and_the_tail_within_the_cap() -> None:
    assert split(10, 2000) == (10, 0)
    assert split(2000, 2000) == (2000, 0)
    assert split(100_000, 2000) == (1000, 1000)
    assert split(100_000, 1001) == (501, 500)
    assert Settings().judge_max_events == DEFAULT_MAX_EVENTS == 2000


def test_a_conversation_above_the_cap_is_judged_on_cap_events_and_every_verdict_says_so() -> None:
    events = long_conversation(6000)
    conv = Conversation.capped(events, 1000)
    assert len(conv.events) == 1000
    assert conv.events[:500] == tuple(events[:500]) and conv.events[500:] == tuple(events[-500:])
    assert conv.gap == 500 and conv.omitted is not None
    assert (conv.omitted.events, conv.omitted.total) == (5000, 6000)
    assert conv.omitted.resume_at == events[-500].event_id
    verdicts = asyncio.run(JudgeRunner(deterministic_judges()).run(conv, set()))
    assert verdicts
    judged = {e.event_id for e in conv.events}
    assert all(v.item_id in judged for v in verdicts)  # nothing from the omitted middle
    for v in verdicts:
        cap = v.evidence["truncated"]
        assert (cap["max_events"], cap["events"], cap["judged"], cap["omitted"]) == (
            1000,
            6000,
            1000,
            5000,
        )
        assert cap["omitted_from"] == events[500].ts.isoformat()
        assert cap["omitted_to"] == events[-501].ts.isoformat()
        assert sum(cap["omitted_by_type"].values()) == 5000
        # exactly which events: those strictly between the two kept ones
        assert (cap["omitted_after"], cap["resume_at"]) == (
            events[499].event_id,
            events[-500].event_id,
        )
        results = [e.tool_result for e in events[500:-500] if e.tool_result is not None]
        tools = cap["omitted_tool_results"]
        assert (tools["ok"], tools["failed"]) == (
            sum(r.ok for r in results),
            sum(not r.ok for r in results),
        )
        assert tools["ok"] + tools["failed"] == cap["omitted_by_type"]["tool_result"]
        assert tools["ok_by_tool"] == dict(Counter(r.name for r in results if r.ok))
    # what an LLM judge reads: one line for the gap, between the head and the tail
    text = render_conversation(conv)
    assert text.count("[... 5000 events omitted (judged: the first and last 1000 of 6000)") == 1
    # a short conversation is not marked
    runner = JudgeRunner(deterministic_judges())
    short = asyncio.run(runner.run(Conversation.of(events[:900]), set()))
    assert short and all("truncated" not in v.evidence for v in short)


def _gapped() -> tuple[Conv, str, str]:
    """A conversation whose only cancel succeeds in the middle; the tail claims it and quotes
    an amount only the middle's tool result holds."""
    c = Conv()
    c.user("Please cancel reservation EHGLP3.")
    for i in range(10):
        c.say(None, (f"g{i}", "get_reservation_details", {"reservation_id": "EHGLP3"}))
        c.result(f"g{i}", "get_reservation_details", '{"status": "confirmed"}')
    c.say(None, ("k1", "cancel_reservation", {"reservation_id": "EHGLP3"}))
    c.result("k1", "cancel_reservation", '{"status": "cancelled", "refund": 742.5}')
    for i in range(10):
        c.user(f"Are you sure? ({i})")
        c.say("Yes.")
    claim = c.say("Your reservation has been cancelled and $742.50 will be refunded.")
    invented = c.say("Your reservation has been cancelled: the refund is $13.25.")
    return c, claim, invented


def test_a_claim_after_the_gap_is_backed_by_a_tool_that_succeeded_in_it() -> None:
    c, claim, _ = _gapped()
    full = {v.item_id: v for v in AuthorizationFabricationJudge().judge(c.conv())}
    capped = Conversation.capped(c.events, 20)
    assert capped.omitted is not None and capped.omitted.tool_successes["cancel_reservation"] == 1
    (v,) = [v for v in AuthorizationFabricationJudge().judge(capped) if v.item_id == claim]
    assert v.label == full[claim].label == 1
    (cancel,) = [x for x in v.evidence["claims"] if x["family"] == "cancel"]
    assert cancel["supported_by"] == [{"name": "cancel_reservation", "omitted_successes": 1}]
    # with no summary of the gap the same claim would look fabricated
    bare = Conversation.of(capped.events)
    assert {v.item_id: v.label for v in AuthorizationFabricationJudge().judge(bare)}[claim] == 0


def test_a_figure_after_the_gap_not_in_the_events_judged_is_unverified_not_unsupported() -> None:
    c, claim, invented = _gapped()
    full = {v.item_id: v for v in UnsupportedFigureJudge().judge(c.conv())}
    assert (full[claim].label, full[invented].label) == (1, 0)
    cut = Conversation.capped(c.events, 20)
    capped = {v.item_id: v for v in UnsupportedFigureJudge().judge(cut)}
    # both amounts may come from the omitted middle: no verdict (nothing left to decide)
    assert claim not in capped and invented not in capped


async def test_the_store_loads_cap_events_and_summarises_the_rest(database_url: str) -> None:
    events = long_conversation(5000, "c-cap")
    writer = EventWriter(database_url)
    try:
        for lo in range(0, len(events), 2500):
            await writer.write([event_row(e) for e in events[lo : lo + 2500]])
    finally:
        await writer.close()
    pool = await asyncpg.create_pool(libpq_url(database_url), min_size=1, max_size=2)
    try:
        stored = await judge_repo.load_for_judging(pool, "c-cap", 1000)
        small = await judge_repo.load_for_judging(pool, "c-cap", 5000)
        missing = await judge_repo.load_for_judging(pool, "nope", 1000)
    finally:
        await pool.close()
    assert len(stored.bodies) == 1000  # the other 4000 are never loaded
    ids = [json.loads(b)["event_id"] for b in stored.bodies]
    assert ids == [e.event_id for e in events[:500] + events[-500:]]
    expected = summarise(events[500:-500], 5000, 1000, events[-500].event_id, events[499].event_id)
    assert stored.omitted == expected
    assert (stored.events, stored.judged_events, stored.rejudges) == (5000, None, 0)
    successes = {"get_reservation_details": 363, "cancel_reservation": 363}
    assert stored.omitted.tool_successes == successes
    assert (len(small.bodies), small.omitted) == (5000, None)
    assert (missing.bodies, missing.omitted) == ([], None)
    conv = Conversation.of(judge_repo.parse_bodies(stored.bodies), False, stored.omitted)
    assert conv.gap == 500


async def test_monitor_judges_counts_the_conversations_judged_on_capped_events(
    database_url: str,
) -> None:
    long, short = long_conversation(3000, "c-capped"), long_conversation(300, "c-short")
    writer = EventWriter(database_url)
    try:
        await writer.write([event_row(e) for e in long + short])
    finally:
        await writer.close()
    runner = JudgeRunner(deterministic_judges())
    verdicts = await runner.run(Conversation.capped(long, 1000), set())
    verdicts += await runner.run(Conversation.capped(short, 1000), set())
    pool = await asyncpg.create_pool(libpq_url(database_url), min_size=1, max_size=2)
    try:
        agents = {"c-capped": "agent-long", "c-short": "agent-long"}
        await judge_repo.write_verdicts(pool, agents, verdicts)
    finally:
        await pool.close()
    args = ["judges", "--from", "2000-01-01T00:00:00+00:00"]
    env = {"MONITOR_DATABASE_URL": database_url, "COLUMNS": "300"}
    res = await asyncio.to_thread(CliRunner().invoke, app, [*args, "--json"], env=env)
    assert res.exit_code == 0, res.output
    volumes = {v["judge"]: v for v in json.loads(res.output)["judges"]}
    assert volumes["det.authorization"]["truncated"] == 1  # c-short is under the cap
    assert volumes["det.repeated_call"]["truncated"] == 1
    text = await asyncio.to_thread(CliRunner().invoke, app, args, env=env)
    assert f"det.authorization {DET_VERSION}: 1 conversation(s) above the cap" in text.output
