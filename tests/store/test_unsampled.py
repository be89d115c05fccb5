"""Raw events kept in proportion to the sample, against real Postgres.

The same simulated traffic is written through the real ``EventWriter`` into three stores, at
sample rates 1.0, 0.1 and 0.01 (always-sample rules off, so the rate alone decides what is
kept), then a retention run past the unsampled window empties the unsampled leaves:

- every roll-up that does not depend on the sample (events per type and segment, the ingest
  delay count, conversations per minute, the conversation rows, the segment values) is
  identical at the three rates, and so is every dashboard query over them;
- at each rate, every dashboard query (all 63, as Grafana sends them) answers the same before
  and after the unsampled events are gone: no figure reads raw events;
- the bytes kept per event fall with the rate: ``events``, their de-duplication keys
  (``event_ids``, emptied with the leaf) and the three with the ``conversations`` rows, and
  the dead-letter rate's event count (``dlq_counts``) stays exact (it reads the roll-up).

De-duplication: inside the window a re-delivered batch is dropped whole, on both paths; after
it, a kept event is still a duplicate, while an event whose leaf was emptied (its key with it)
is stored again: the stated limit of the window (docs/scaling.md).

Promotion (on the direct and the staged write path): a conversation outside the sample whose
escalation (an always-sample rule) arrives in a later batch has its earlier events moved to
the kept leaf in that batch's transaction; after the window the judges are offered it and read
its whole transcript, while a conversation never promoted keeps only its roll-up row. The
migration's upgrade and downgrade move stored rows between the two layouts without losing any.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from monitor.alerts.observation_repo import dlq_counts
from monitor.core.retention_settings import RetentionSettings
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.judges.rejudge import JudgeTiming
from monitor.judges.repo import claim_candidates, load_for_judging
from monitor.sampling.policy import SamplingPolicy
from monitor.sampling.rules import AlwaysSampleRules
from monitor.sim.traffic import Simulator
from monitor.store.engine import downgrade, libpq_url, make_engine, upgrade
from monitor.store.retention import RetentionReport, run_retention
from tests.factories import T0, event
from tests.ingest.test_read_rollups import dashboard_sql

NOW = datetime.now(UTC).replace(microsecond=0)
NO_RULES = AlwaysSampleRules(escalation=False, failed_tool_call=False, negative_feedback_below=None)
WINDOW = RetentionSettings(retention_unsampled_hours=48)

EVENT_BYTES = """SELECT coalesce(sum(pg_total_relation_size(relid)), 0)
FROM pg_partition_tree('events') WHERE isleaf"""
# the keys compacted (a copy of the live ones, as bench/ingest.py measures them: a VACUUM FULL
# keeps deleted rows while another snapshot is older): in a running store the space of the
# deleted keys is taken by the next days' keys, which a single fill does not show
COMPACT_KEYS = """
CREATE TEMP TABLE keys_compact AS SELECT * FROM event_ids ORDER BY event_key;
ALTER TABLE keys_compact ADD PRIMARY KEY (event_key);
CREATE INDEX ON keys_compact (ts)"""
KEY_BYTES = "SELECT pg_total_relation_size('keys_compact')"
CONVERSATION_BYTES = "SELECT pg_total_relation_size('conversations')"

# what does not depend on the sample; the minute of ingested_at is summed away (three stores
# are filled one after the other)
SAMPLE_FREE = {
    "event_minutes": "SELECT type, agent_id, domain, tier, sum(events) FROM event_minutes"
    " GROUP BY 1, 2, 3, 4",
    "ingest_delay_bins": "SELECT sum(events) FROM ingest_delay_bins",
    "conversation_minutes": "SELECT * FROM conversation_minutes",
    "segment_values": "SELECT * FROM segment_values",
    "conversations": "SELECT conversation_id, agent_id, domain, tier, first_ts, last_ts,"
    " event_count, message_count, assistant_messages, user_messages, tool_calls, tool_results,"
    " tool_errors, feedback_count, min_confidence, last_confidence, escalated, escalated_at,"
    " escalation_turn, escalation_trigger, first_turn, outcome_success, outcome_reward,"
    " outcome_source FROM conversations",
}
# dashboard queries whose figures are sample estimates (weighted by 1 / rate) or depend on the
# minute a row was ingested: compared before / after the window at each rate, not across rates
SAMPLE_OR_CLOCK = ("calibration", "escalation", "items", "item_hours", "ingested", "pipeline")


def traffic() -> list[Any]:
    sim = Simulator(seed=33, start=NOW - timedelta(hours=6), interval=timedelta(seconds=9))
    return [e for e in sim.events(2000) if e.ts <= NOW]


async def fill(url: str, rate: float, events: list[Any]) -> None:
    writer = EventWriter(url, policy=SamplingPolicy(default_rate=rate, always_sample=NO_RULES))
    try:
        for i in range(0, len(events), 1000):
            await writer.write([event_row(e) for e in events[i : i + 1000]])
    finally:
        await writer.close()


async def retain(url: str, now: datetime) -> RetentionReport:
    """One retention pass over ``url``'s database at ``now`` with the tests' ``WINDOW``."""
    engine = make_engine(url)
    try:
        return await run_retention(engine, WINDOW, now)
    finally:
        await engine.dispose()


async def answers(conn: asyncpg.Connection, sql: str) -> list[tuple[Any, ...]]:
    """The rows of ``sql``, sorted, floats to 12 significant digits: Postgres sums floats in
    the order it reads the rows, which a parallel scan or a rewritten table changes."""
    rows = [tuple(_digits(v) for v in r) for r in await conn.fetch(sql)]
    return sorted(rows, key=repr)


def _digits(value: Any) -> Any:
    return float(f"{value:.12g}") if isinstance(value, float) else value


async def dashboards(conn: asyncpg.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {name: await answers(conn, sql) for name, sql in dashboard_sql()}


def sample_free(name: str, sql: str) -> bool:
    return not any(word in (name + sql).lower() for word in SAMPLE_OR_CLOCK)


async def test_kept_bytes_fall_with_the_rate_and_every_figure_stays(
    database_url: str, second_database_url: str, migrated_template_url: str
) -> None:
    from tests.seeding import database_copy

    events = traffic()
    assert len(events) > 10_000
    third = database_copy(migrated_template_url, "mon_test")
    urls = {1.0: database_url, 0.1: second_database_url, 0.01: await third.__aenter__()}
    figures: dict[float, dict[str, Any]] = {}
    per_event: dict[float, dict[str, float]] = {}
    try:
        for rate, url in urls.items():
            await fill(url, rate, events)
            conn = await asyncpg.connect(libpq_url(url))
            try:
                stored = int(await conn.fetchval("SELECT count(*) FROM events"))
                assert stored == len(events)  # every event stored inside the window
                before = await dashboards(conn)
                minutes = await conn.fetchrow(
                    "SELECT date_trunc('minute', min(ingested_at)) AS lo,"
                    " date_trunc('minute', max(ingested_at)) + interval '1 minute' AS hi,"
                    " min(ingested_at) + interval '1 microsecond' AS inside FROM events"
                )
                odd = (minutes["inside"], minutes["hi"] + timedelta(seconds=7))
                raw_odd = await conn.fetchval(
                    "SELECT count(*) FROM events WHERE ingested_at >= $1 AND ingested_at < $2",
                    *odd,
                )
                engine = make_engine(url)
                try:
                    assert await dlq_counts(engine, *odd) == (raw_odd, 0)  # edges from events
                    whole = (minutes["lo"], minutes["hi"])
                    assert await dlq_counts(engine, *whole) == (len(events), 0)
                    report = await retain(url, NOW + timedelta(hours=49))
                    # the whole minutes read the roll-up: exact without the unsampled events
                    assert await dlq_counts(engine, *whole) == (len(events), 0)
                finally:
                    await engine.dispose()
                assert report.failed == []
                # one leaf per day of the traffic (one, or two across midnight)
                assert (report.unsampled_emptied == 0) == (rate == 1.0)
                after = await dashboards(conn)
                assert after == before  # no dashboard figure reads the raw events
                kept_cids = await conn.fetchval(
                    "SELECT count(DISTINCT conversation_id) FROM events"
                )
                sampled = await conn.fetchval(
                    "SELECT count(*) FROM conversations WHERE sampled_by_rate"
                )
                assert kept_cids == sampled
                assert await conn.fetchval("SELECT bool_and(kept) FROM events") in (True, None)
                kept_rows = await conn.fetchval("SELECT count(*) FROM events")
                # every key left is a stored event's: the keys went with the emptied leaves
                assert await conn.fetchval("SELECT count(*) FROM event_ids") == kept_rows
                await conn.execute("VACUUM ANALYZE")
                await conn.execute(COMPACT_KEYS)
                per_event[rate] = {
                    name: int(await conn.fetchval(sql)) / len(events)
                    for name, sql in (
                        ("events", EVENT_BYTES),
                        ("event_ids", KEY_BYTES),
                        ("conversations", CONVERSATION_BYTES),
                    )
                }
                per_event[rate]["total"] = sum(per_event[rate].values())
                figures[rate] = {
                    name: await answers(conn, sql) for name, sql in SAMPLE_FREE.items()
                }
                figures[rate]["dashboards"] = {
                    name: rows
                    for (name, sql), rows in zip(dashboard_sql(), after.values(), strict=True)
                    if sample_free(name, sql)
                }
            finally:
                await conn.close()
    finally:
        await third.__aexit__(None, None, None)
    assert len(figures[1.0]["dashboards"]) >= 10
    assert figures[0.1] == figures[1.0]
    assert figures[0.01] == figures[1.0]
    assert sum(r[-1] for r in figures[1.0]["event_minutes"]) == len(events)
    # bytes per event kept after the window: about the rate's share (plus the empty leaves and
    # the tables' first pages); the conversation rows stay (every reader is listed in
    # docs/scaling.md), so the total falls to the rate's share plus them
    one, tenth, hundredth = per_event[1.0], per_event[0.1], per_event[0.01]
    for name in ("events", "event_ids"):
        assert tenth[name] < 0.2 * one[name] and hundredth[name] < 0.05 * one[name], name
    assert tenth["conversations"] == pytest.approx(one["conversations"], rel=0.1)
    assert tenth["total"] < 0.2 * (one["events"] + one["event_ids"]) + 1.1 * one["conversations"]
    assert (
        hundredth["total"] < 0.05 * (one["events"] + one["event_ids"]) + 1.1 * one["conversations"]
    )
    print(f"bytes per event after the window: {per_event}")


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "staged"])
async def test_promotion_keeps_the_whole_transcript_for_the_judges(
    database_url: str, direct: bool
) -> None:
    at = (NOW - timedelta(hours=2) - T0).total_seconds()
    early = [
        event("p-1", "c-promoted", "message", at=at),
        event("p-2", "c-promoted", "message", at=at + 5),
        event("q-1", "c-quiet", "message", at=at),
        event("q-2", "c-quiet", "message", at=at + 5),
    ]
    late = [event("p-3", "c-promoted", "escalation", at=at + 3600)]
    later = [event("p-4", "c-promoted", "message", at=at + 3700)]
    writer = EventWriter(database_url, policy=SamplingPolicy(default_rate=0.0), direct=direct)
    try:
        first = await writer.write([event_row(e) for e in early])
        assert first.unkept == 4 and first.promoted == 0
        second = await writer.write([event_row(e) for e in late])
        assert second.unkept == 0 and second.promoted == 2  # the two earlier events moved
        third = await writer.write([event_row(e) for e in later])
        assert third.unkept == 0 and third.promoted == 0  # kept when written, nothing to move
    finally:
        await writer.close()
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        kept = await conn.fetch(
            "SELECT tableoid::regclass::text AS leaf, conversation_id FROM events ORDER BY 2"
        )
        assert {(r["conversation_id"], r["leaf"].endswith("_k")) for r in kept} == {
            ("c-promoted", True),
            ("c-quiet", False),
        }
        report = await retain(database_url, NOW + timedelta(hours=49))
        assert report.unsampled_emptied == 1
        left = await conn.fetch("SELECT conversation_id, count(*) FROM events GROUP BY 1")
        assert [tuple(r) for r in left] == [("c-promoted", 4)]
        keys = await conn.fetch("SELECT conversation_id, count(*) FROM event_ids GROUP BY 1")
        assert [tuple(r) for r in keys] == [("c-promoted", 4)]  # the quiet ones' went with them
        # the quiet conversation keeps its roll-up row
        assert (
            await conn.fetchval(
                "SELECT event_count FROM conversations WHERE conversation_id = 'c-quiet'"
            )
            == 2
        )
    finally:
        await conn.close()
    pool = await asyncpg.create_pool(libpq_url(database_url), min_size=1, max_size=1)
    assert pool is not None
    try:
        published: list[Any] = []

        async def publish(requests: list[Any]) -> None:
            published.extend(requests)

        await claim_candidates(
            pool,
            SamplingPolicy().always_sample,
            NOW + timedelta(hours=49),
            JudgeTiming(idle_s=0, arrival_idle_s=0),
            10,
            publish,
        )
        assert [r.conversation_id for r in published] == ["c-promoted"]
        stored = await load_for_judging(pool, "c-promoted", 100)
        assert len(stored.bodies) == 4 and stored.omitted is None
    finally:
        await pool.close()


async def test_within_the_window_nothing_is_emptied(database_url: str) -> None:
    events = traffic()[:3000]
    await fill(database_url, 0.1, events)
    report = await retain(database_url, NOW + timedelta(hours=47))
    assert report.unsampled_emptied == 0
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        assert await conn.fetchval("SELECT count(*) FROM events") == len(events)
    finally:
        await conn.close()


async def test_migration_moves_rows_between_layouts(database_url: str) -> None:
    events = traffic()[:3000]
    await fill(database_url, 0.1, events)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        unkept = await conn.fetchval("SELECT count(*) FROM events WHERE NOT kept")
        assert 0 < unkept < len(events)
        await asyncio.to_thread(downgrade, database_url, "0026")
        assert await conn.fetchval("SELECT count(*) FROM events") == len(events)
        leaves = await conn.fetchval(
            "SELECT count(*) FROM pg_partition_tree('events') WHERE isleaf AND level > 1"
        )
        assert leaves == 0  # plain day partitions again
        await asyncio.to_thread(upgrade, database_url, "head")
        assert await conn.fetchval("SELECT count(*) FROM events") == len(events)
        assert await conn.fetchval("SELECT count(*) FROM events WHERE NOT kept") == 0
        assert await conn.fetchval(
            "SELECT count(*) FROM pg_partition_tree('events') WHERE isleaf AND level = 2"
        ) == 2 * await conn.fetchval(
            "SELECT count(*) FROM pg_partition_tree('events') WHERE level = 1"
        )
    finally:
        await conn.close()
    # the upgraded store takes new unkept events
    await fill(database_url, 0.1, traffic()[3000:4000])


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "staged"])
async def test_a_duplicate_is_dropped_inside_the_window_and_its_key_goes_with_the_leaf(
    database_url: str, direct: bool
) -> None:
    events = traffic()[:3000]
    await fill(database_url, 0.1, events)
    policy = SamplingPolicy(default_rate=0.1, always_sample=NO_RULES)
    conn = await asyncpg.connect(libpq_url(database_url))
    writer = EventWriter(database_url, policy=policy, direct=direct)
    total = "SELECT (SELECT count(*) FROM events), (SELECT sum(events) FROM event_minutes)"
    try:
        unkept = await conn.fetchval("SELECT count(*) FROM events WHERE NOT kept")
        assert 0 < unkept < len(events)
        # inside the window: every re-delivered event is a duplicate, dropped once
        again = await writer.write([event_row(e) for e in events])
        assert (again.inserted, again.duplicates, again.conflicting) == (0, len(events), 0)
        assert tuple(await conn.fetchrow(total)) == (len(events), len(events))
        report = await retain(database_url, NOW + timedelta(hours=49))
        assert report.unsampled_emptied >= 1
        kept = len(events) - unkept
        assert await conn.fetchval("SELECT count(*) FROM event_ids") == kept
        # after it: a kept event is still a duplicate; one whose leaf was emptied is new again
        late = await writer.write([event_row(e) for e in events])
        assert (late.inserted, late.duplicates) == (unkept, kept)
        assert tuple(await conn.fetchrow(total)) == (len(events), len(events) + unkept)
    finally:
        await writer.close()
        await conn.close()


async def test_the_key_migration_keeps_every_key_both_ways(database_url: str) -> None:
    events = traffic()[:3000]
    await fill(database_url, 0.1, events)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        keys = await conn.fetchval("SELECT count(*) FROM event_ids")
        assert keys == len(events)
        await asyncio.to_thread(downgrade, database_url, "0030")
        joined = "SELECT count(*) FROM event_ids k JOIN events e USING (event_id, ts)"
        assert await conn.fetchval(joined) == keys  # the text keys again, one per event
        await asyncio.to_thread(upgrade, database_url, "head")
        digests = (
            "SELECT count(*) FROM event_ids k JOIN events e ON k.event_key = md5(e.event_id)::uuid"
        )
        assert await conn.fetchval(digests) == keys
    finally:
        await conn.close()
    writer = EventWriter(
        database_url, policy=SamplingPolicy(default_rate=0.1, always_sample=NO_RULES)
    )
    try:
        again = await writer.write([event_row(e) for e in events])
        assert (again.inserted, again.duplicates) == (0, len(events))
    finally:
        await writer.close()
