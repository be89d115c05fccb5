"""When a conversation is judged and judged again: the pure decision on plain values, then the
scheduler's SQL against it on real Postgres (the same states, the same choice)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.judges import repo as judge_repo
from monitor.judges.rejudge import Due, JudgeTiming, JudgingState, due, is_idle, replaces, watch
from monitor.sampling.policy import SamplingPolicy
from monitor.store.engine import libpq_url
from tests.factories import event

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)  # the scheduler's clock (event time)
STORE = datetime(2026, 12, 7, 12, 0, 40, tzinfo=UTC)  # the store's clock (arrival)
TIMING = JudgeTiming(idle_s=30, arrival_idle_s=30, rejudge_most=2, rejudge_gap_s=60)


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


#: a conversation replayed from a file: its events a year old, the last one arrived long ago
IDLE = JudgingState(last_ts=NOW - timedelta(days=365), last_arrival=STORE - s(100), event_count=40)
#: the same, judged on all 40 events two minutes ago
JUDGED = replace(IDLE, requested=True, judged_events=40, judged_at=STORE - s(120))


def test_idle_needs_both_event_time_and_arrival() -> None:
    old, recent = NOW - s(31), NOW - s(29)
    assert is_idle(old, STORE - s(31), NOW, STORE, TIMING)
    # a replay: the events are a year old but the last one arrived 29 s ago (store's clock)
    assert not is_idle(NOW - timedelta(days=365), STORE - s(29), NOW, STORE, TIMING)
    # a live conversation: stored long ago by the store's clock, its last event 29 s old
    assert not is_idle(recent, STORE - s(31), NOW, STORE, TIMING)
    # each clock judges its own stamps: 30 s exactly is not yet idle
    assert not is_idle(NOW - s(30), STORE - s(31), NOW, STORE, TIMING)
    assert not is_idle(old, STORE - s(30), NOW, STORE, TIMING)
    assert is_idle(NOW, STORE, NOW + s(0.001), STORE + s(0.001), JudgeTiming(0, 0))


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (IDLE, Due.JUDGE),
        # old events still arriving (the 100,000-event conversation judged on a quarter)
        (replace(IDLE, last_arrival=STORE - s(5)), Due.ARRIVING),
        (replace(IDLE, last_ts=NOW - s(5)), Due.ARRIVING),
        (replace(IDLE, requested=True, pending=True), Due.PENDING),
        (replace(IDLE, requested=True), Due.PENDING),  # requested, no verdicts stored yet
        (JUDGED, Due.CURRENT),
        (replace(JUDGED, event_count=41), Due.REJUDGE),
        (replace(JUDGED, event_count=41, last_arrival=STORE - s(5)), Due.ARRIVING),
        (replace(JUDGED, event_count=41, judged_at=STORE - s(60)), Due.GAP),
        (replace(JUDGED, event_count=41, judged_at=STORE - s(61)), Due.REJUDGE),
        (replace(JUDGED, event_count=41, rejudges=1), Due.REJUDGE),
        (replace(JUDGED, event_count=41, rejudges=2), Due.SPENT),
        (replace(JUDGED, event_count=41, rejudges=2, pending=True), Due.PENDING),
    ],
)
def test_due(state: JudgingState, expected: Due) -> None:
    assert due(state, NOW, STORE, TIMING) is expected


def test_judged_once_when_re_judging_is_off() -> None:
    grown = replace(JUDGED, event_count=41)
    assert due(grown, NOW, STORE, replace(TIMING, rejudge_most=0)) is Due.SPENT
    assert watch(40, 0, replace(TIMING, rejudge_most=0)) is None


def test_watch_and_replaces() -> None:
    # watched above the count judged while re-judgements are left
    assert [watch(40, n, TIMING) for n in range(4)] == [40, 40, None, None]
    assert not replaces(40, None)  # a first judgement: only the judges without a verdict run
    assert not replaces(40, 40)  # the same events again (a request delivered twice)
    assert replaces(41, 40)  # grew since: every judge runs, every verdict replaced


def test_timing_refuses_negative_values() -> None:
    with pytest.raises(ValueError):
        JudgeTiming(rejudge_most=-1)
    with pytest.raises(ValueError):
        JudgeTiming(arrival_idle_s=-1)


# --- the scheduler's SQL against the same decision --------------------------------------------

#: (name, state relative to the store's and the scheduler's clocks, watch stored); ``watch``
#: None: the one :func:`watch` gives; a number: a watch stored under a higher bound since lowered
CASES: list[tuple[str, JudgingState, int | None]] = [
    ("fresh", IDLE, None),
    ("arriving", replace(IDLE, last_arrival=STORE - s(5)), None),
    ("live", replace(IDLE, last_ts=NOW - s(5)), None),
    ("pending", replace(JUDGED, event_count=45, pending=True, judged_at=None), None),
    ("current", JUDGED, None),
    ("grown", replace(JUDGED, event_count=45), None),
    ("grown-arriving", replace(JUDGED, event_count=45, last_arrival=STORE - s(5)), None),
    ("grown-gap", replace(JUDGED, event_count=45, judged_at=STORE - s(20)), None),
    ("grown-spent", replace(JUDGED, event_count=45, rejudges=2), None),
    ("grown-lowered", replace(JUDGED, event_count=45, rejudges=2), 40),
]


async def _set_state(
    conn: asyncpg.Connection, cid: str, st: JudgingState, stored_watch: int | None, store: datetime
) -> None:
    """Give conversation ``cid`` the columns of ``st`` (its store times moved from
    :data:`STORE` to the store's clock ``store``)."""
    shift = store - STORE
    judged = st.judged_events is not None and not st.pending
    kept = stored_watch if stored_watch is not None else None
    if kept is None and judged:
        assert st.judged_events is not None
        kept = watch(st.judged_events, st.rejudges, TIMING)
    await conn.execute(
        "UPDATE conversations SET last_ts = $2, updated_at = $3, event_count = $4,"
        " judge_requested_at = $5, judge_watch = $6 WHERE conversation_id = $1",
        cid,
        st.last_ts,
        st.last_arrival + shift,
        st.event_count,
        NOW - timedelta(hours=1) if st.requested else None,
        kept,
    )
    if st.requested:
        await conn.execute(
            "INSERT INTO judge_requests (conversation_id, agent_id, reasons, requested_at,"
            " judged_at, judged_events, rejudges) VALUES ($1, 'agent-a', '[\"rate\"]', $2, $3,"
            " $4, $5)",
            cid,
            NOW - timedelta(hours=1),
            None if st.judged_at is None else st.judged_at + shift,
            st.judged_events,
            st.rejudges,
        )


async def test_the_scheduler_claims_exactly_what_the_decision_says(database_url: str) -> None:
    writer = EventWriter(database_url)  # the default policy samples every conversation
    try:
        await writer.write([event_row(event(f"e-{n}", n, at=0)) for n, _, _ in CASES])
    finally:
        await writer.close()
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        store = await conn.fetchval("SELECT now()")
        for name, st, kept in CASES:
            await _set_state(conn, name, st, kept, store)
    finally:
        await conn.close()
    pool = await asyncpg.create_pool(libpq_url(database_url), min_size=1, max_size=2)
    published: list[judge_repo.JudgeRequest] = []

    async def publish(requests: list[judge_repo.JudgeRequest]) -> None:
        published.extend(requests)

    try:
        rules = SamplingPolicy().always_sample
        first = await judge_repo.claim_candidates(pool, rules, NOW, TIMING, 100, publish)
        again = await judge_repo.claim_rejudges(pool, NOW, TIMING, 100, publish)
        # a second round claims nothing: the claimed ones are pending now
        assert await judge_repo.claim_candidates(pool, rules, NOW, TIMING, 100, publish) == []
        assert await judge_repo.claim_rejudges(pool, NOW, TIMING, 100, publish) == []
        rows = await pool.fetch(
            "SELECT r.conversation_id, r.judged_at, r.rejudges, c.judge_watch"
            " FROM judge_requests r JOIN conversations c USING (conversation_id)"
        )
    finally:
        await pool.close()
    decided = {name: due(st, NOW, STORE, TIMING) for name, st, _ in CASES}
    assert {q.conversation_id for q in first} == {n for n, d in decided.items() if d is Due.JUDGE}
    assert {q.conversation_id for q in again} == {n for n, d in decided.items() if d is Due.REJUDGE}
    assert {q.conversation_id for q in first} == {"fresh"}
    assert {q.conversation_id for q in again} == {"grown"}
    assert decided["grown-lowered"] is Due.SPENT  # the stored watch does not outlive the bound
    (grown,) = again
    assert (grown.rejudge, grown.reasons) == (1, ("rate",))
    assert json.loads(grown.to_json())["rejudge"] == 1
    state: dict[str, Any] = {r["conversation_id"]: r for r in rows}
    # the re-judged one is pending again: not watched, not judged, counted
    assert state["grown"]["judged_at"] is None and state["grown"]["judge_watch"] is None
    assert state["grown"]["rejudges"] == 1
    assert state["grown-gap"]["judge_watch"] == 40  # still watched: its turn comes later
