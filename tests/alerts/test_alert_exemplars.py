"""Every default alert rule fired on real answers in real Postgres, and its exemplars show the
problem by the rule docs/runbooks.md states (monitor/alerts/exemplars.py, ``PICK_RULES``).

The data (tests/alerts/exemplar_data.py): real model answers resampled into agents that break
one rule each, two real tau2-bench runs, the gate's own decisions on real answers; written
through the ingest writer (one agent sampled at 20 %), the deterministic judges' verdicts
stored, then the worker's own walk (drift checks, then evaluation, every 5 minutes:
``monitor.alerts.timeline``) over the last two hours, once per module. Each test compares the
stored exemplars with what the answers themselves say, computed here in Python.

Also: the exemplars ride in the outbox payloads; their conversations were promoted into the
kept sample; a later event of one goes straight to the kept leaf; a retention run past the
unsampled window keeps their transcripts, and one past every horizon keeps the exemplars, their
conversation rows and their verdicts. The pipeline rules (dead letters, consumer lag, ingest
stall) are fired at the wall clock in a database of their own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from typer.testing import CliRunner

from monitor.alerts import exemplar_repo
from monitor.alerts.backtest import DriftJob
from monitor.alerts.evaluate import evaluate_once
from monitor.alerts.exemplars import CANDIDATES, episode_key
from monitor.alerts.observations import category_matches
from monitor.alerts.rules import RuleSet, default_rules
from monitor.alerts.sinks.alertmanager import AlertmanagerSink
from monitor.alerts.sinks.base import DeliveryContext
from monitor.alerts.sinks.slack import SlackSink
from monitor.alerts.sinks.webhook import WebhookSink
from monitor.alerts.timeline import replay_alert_timeline
from monitor.analytics.bins import bin_index
from monitor.cli.main import app
from monitor.contract.events import Agent, Context, decode_event
from monitor.core.errors import InvalidEvent
from monitor.core.retention_settings import RetentionSettings
from monitor.ingest.rows import DeadLetter, event_row
from monitor.ingest.writer import EventWriter
from monitor.judges.repo import write_verdicts
from monitor.store.engine import drop_database, libpq_url, make_engine
from monitor.store.retention import run_retention
from tests.alerts import exemplar_data as data
from tests.alerts import test_alert_sinks
from tests.db import fetch
from tests.seeding import copy_database, database_copy, engine_on_copy, seeded_database
from tests.servers.alert_servers import SlackServer, WebhookReceiver

RULES = default_rules()
alertmanager = test_alert_sinks.alertmanager  # a real prometheus-alertmanager (fixture)
DRIFT = DriftJob()
WALK_FROM = data.T0 + timedelta(hours=2)
WALK_TO = data.T0 + timedelta(hours=data.HOURS)
EVENTS, TRUTH = data.build()

#: the tests share a module fixture: one xdist process makes it (`--dist loadgroup`); the
#: fixture's walk takes about a minute (slow: the file runs first)
pytestmark = [pytest.mark.xdist_group("alert-exemplars"), pytest.mark.slow]


async def _seed_and_walk(url: str) -> None:
    """The verdicts (stored two minutes after each judged conversation's last event), then the
    worker's walk."""
    pool = await asyncpg.create_pool(libpq_url(url), min_size=1, max_size=2)
    try:
        verdicts = data.verdicts(TRUTH)
        await write_verdicts(pool, {c: TRUTH.agent_of[c] for c in TRUTH.judged}, verdicts)
        await pool.execute(
            "UPDATE verdicts v SET created_at = c.last_ts + interval '2 minutes'"
            " FROM conversations c WHERE c.conversation_id = v.conversation_id"
        )
    finally:
        await pool.close()
    engine = make_engine(url)
    try:
        await replay_alert_timeline(
            engine,
            RULES,
            WALK_FROM,
            WALK_TO,
            timedelta(minutes=5),
            sinks={"webhook": None},
            notifier=None,
            drift_recent=DRIFT.recent,
            drift_alpha=DRIFT.alpha,
            drift_min_samples=DRIFT.min_samples,
            drift_reference=DRIFT.reference,
            drift_min_reference=DRIFT.min_reference,
        )
    finally:
        await engine.dispose()


async def _write(url: str) -> None:
    writer = EventWriter(url, policy=data.POLICY)
    try:
        rows = [event_row(e) for e in sorted(EVENTS, key=lambda e: e.ts)]
        for i in range(0, len(rows), 5000):
            await writer.write(rows[i : i + 5000])
    finally:
        await writer.close()


@pytest.fixture(scope="module")
def walked(migrated_template_url: str) -> Iterator[str]:
    """A database holding the data and what the walk wrote (read it, or copy it to change it)."""
    with seeded_database(migrated_template_url, "mon_extpl", []) as url:
        asyncio.run(_write(url))
        asyncio.run(_seed_and_walk(url))
        yield url


def _rows(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    return asyncio.run(fetch(url, sql, *args))


def first_episode(url: str, rule: str, agent: str) -> tuple[str, datetime, list[asyncpg.Record]]:
    """The first episode of ``rule`` for ``agent`` with exemplars: fingerprint, fired_at, and
    the exemplars by rank."""
    found = _rows(
        url,
        "SELECT x.fingerprint, x.fired_at FROM alert_exemplars x"
        " JOIN alert_states s ON s.fingerprint = x.fingerprint"
        " WHERE x.rule = $1 AND s.scope->>'agent' = $2 ORDER BY x.fired_at LIMIT 1",
        rule,
        agent,
    )
    assert found, f"{rule} fired for {agent} with no exemplars (or never fired)"
    fp, fired = found[0]["fingerprint"], found[0]["fired_at"]
    rows = _rows(
        url,
        "SELECT rank, conversation_id, reason, detail FROM alert_exemplars"
        " WHERE fingerprint = $1 AND fired_at = $2 ORDER BY rank",
        fp,
        fired,
    )
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    for r in rows:
        assert "\n" not in r["reason"] and 0 < len(r["reason"]) <= 200
    return fp, fired, rows


def answer(cid: str) -> tuple[str, datetime, float, int]:
    return TRUTH.answers[cid]


def _confidences(found: Iterable[tuple[datetime, float]], highest: bool = True) -> list[float]:
    """The confidences of the latest :data:`CANDIDATES` of ``(time, confidence)``, highest
    (else lowest) first: what a pick rule reads and ranks."""
    latest = sorted(found, reverse=True)[:CANDIDATES]
    return sorted((conf for _, conf in latest), reverse=highest)


# --- calibration, Brier, overconfidence: failed, most confident --------------------------------


@pytest.mark.parametrize(
    ("rule", "agent"),
    [
        ("ece_tier3", "over-t3"),
        ("overconfidence_tier3", "over-t3"),
        ("brier_tier3", "over-t3"),
        ("ece_tier2", "over-t2"),
        ("ece_tier1", "over-t1"),
    ],
)
def test_calibration_exemplars_are_the_most_confident_failures(
    walked: str, rule: str, agent: str
) -> None:
    _, fired, rows = first_episode(walked, rule, agent)
    lo = fired - RULES.rule(rule).window
    failed = _confidences(
        (at, conf)
        for a, at, conf, y in TRUTH.answers.values()
        if a == agent and lo <= at < fired and not y
    )
    assert len(rows) == 3
    assert [answer(r["conversation_id"])[2] for r in rows] == failed[:3]
    if agent == "over-t3":  # the bound is in play: more failures in the window than it reads
        assert (
            sum(
                1
                for a, at, _, y in TRUTH.answers.values()
                if a == agent and lo <= at < fired and not y
            )
            > CANDIDATES
        )
    for r in rows:
        a, at, conf, y = answer(r["conversation_id"])
        assert a == agent and y == 0 and lo <= at < fired
        assert r["reason"].startswith("failed (outcome:ground_truth) at stated confidence")
        assert f"{conf:.2f}" in r["reason"]
        if agent == "over-t3":  # quotes its reply, redacted before it is stored
            assert "[email] with token=[secret]" in r["reason"]
            assert not any(s in r["reason"] for s in data.LEAKED)


# --- drift: the bins whose accuracy fell most -------------------------------------------------


def _bins(agent: str, lo: datetime, hi: datetime) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for a, at, conf, y in TRUTH.answers.values():
        if a == agent and lo <= at < hi:
            out.setdefault(int(bin_index(conf)[0]), []).append(y)
    return out


def _fall_z(ref: list[int], rec: list[int]) -> float | None:
    if len(ref) < 5 or len(rec) < 5:
        return None
    a, r = sum(ref) / len(ref), sum(rec) / len(rec)
    p = (sum(ref) + sum(rec)) / (len(ref) + len(rec))
    se = (p * (1 - p) * (1 / len(ref) + 1 / len(rec))) ** 0.5
    return (a - r) / se if se > 0 else None


@pytest.mark.parametrize("rule", ["drift_tier3", "drift_accuracy_drop"])
def test_drift_exemplars_are_failures_of_the_bins_whose_accuracy_fell_most(
    walked: str, rule: str
) -> None:
    _, fired, rows = first_episode(walked, rule, "changed")
    assert fired >= data.CHANGE
    windows = json.loads(rows[0]["detail"])["check"]
    ref = (
        datetime.fromisoformat(windows["baseline_from"]),
        datetime.fromisoformat(windows["baseline_to"]),
    )
    rec = (
        datetime.fromisoformat(windows["recent_from"]),
        datetime.fromisoformat(windows["recent_to"]),
    )
    before, after = _bins("changed", *ref), _bins("changed", *rec)
    z = {b: _fall_z(before.get(b, []), after.get(b, [])) for b in range(10)}
    fell = sorted((b for b in z if (z[b] or 0) > 0), key=lambda b: -(z[b] or 0))
    assert fell, "the change lowered the accuracy of no bin"
    assert len(rows) == 3
    top = fell[0]
    in_top = [r for r in rows if int(bin_index(answer(r["conversation_id"])[2])[0]) == top]
    assert in_top and in_top == rows[: len(in_top)]  # the top bin's first
    failed_top = _confidences(
        (at, conf)
        for a, at, conf, y in TRUTH.answers.values()
        if a == "changed" and rec[0] <= at < rec[1] and not y and int(bin_index(conf)[0]) == top
    )
    assert [answer(r["conversation_id"])[2] for r in in_top] == failed_top[: len(in_top)]
    for r in rows:
        a, at, conf, y = answer(r["conversation_id"])
        assert a == "changed" and y == 0 and rec[0] <= at < rec[1]
        assert int(bin_index(conf)[0]) in fell
        assert "accuracy" in r["reason"] and "in the reference" in r["reason"]


# --- escalation -------------------------------------------------------------------------------


def test_inversion_exemplars_alternate_confident_escalations_and_unsure_misses(walked: str) -> None:
    _, fired, rows = first_episode(walked, "escalation_inversion", "inverted")
    lo = fired - RULES.rule("escalation_inversion").window
    mine = {c: v for c, v in TRUTH.answers.items() if v[0] == "inverted" and lo <= v[1] < fired}
    escalated = _confidences((v[1], v[2]) for c, v in mine.items() if c in TRUTH.escalated)
    missed = _confidences(
        ((v[1], v[2]) for c, v in mine.items() if c not in TRUTH.escalated and not v[3]),
        highest=False,
    )
    assert len(rows) == 3
    got = [(r["conversation_id"] in TRUTH.escalated, answer(r["conversation_id"])[2]) for r in rows]
    assert got == [(True, escalated[0]), (False, missed[0]), (True, escalated[1])]
    assert rows[0]["reason"].startswith("escalated (trigger threshold) although")
    assert rows[1]["reason"].startswith("not escalated at minimum confidence")
    assert answer(rows[1]["conversation_id"])[3] == 0


def test_slow_escalation_exemplars_are_the_slowest(walked: str) -> None:
    agent = "llm_agent:xai/grok-4-fast-reasoning"
    _, fired, rows = first_episode(walked, "slow_escalation_tier3", agent)
    lo = fired - RULES.rule("slow_escalation_tier3").window
    starts = {
        e.conversation_id: e.ts
        for e in sorted(EVENTS, key=lambda e: e.ts, reverse=True)
        if e.conversation_id in TRUTH.escalation_seconds
    }
    slowest = sorted(
        ((s, c) for c, s in TRUTH.escalation_seconds.items() if lo <= starts[c] < fired),
        reverse=True,
    )
    assert len(rows) == 3
    assert [r["conversation_id"] for r in rows] == [c for _, c in slowest[:3]]
    for r, (s, _) in zip(rows, slowest, strict=False):
        assert s > 300 and r["reason"].startswith(f"escalated {s:.0f} s after its first event")


# --- judges -----------------------------------------------------------------------------------


def test_judge_exemplars_are_the_latest_flagged_with_the_judges_evidence(walked: str) -> None:
    agent = "llm_agent:xai/grok-3"
    rule = RULES.rule("authorization_fabrication")
    _, fired, rows = first_episode(walked, "authorization_fabrication", agent)
    judged_at = {
        c: max(e.ts for e in evs) + timedelta(minutes=2) for c, evs in TRUTH.judged.items()
    }
    flagged = {
        v.conversation_id
        for v in data.verdicts(TRUTH)
        if any(category_matches(rule.category or "", c) for c in v.categories)
    }
    assert len(flagged) == 2  # the run's action claims no tool call backs (checks, consent and
    # negations are not claims: docs/benchmarks.md, "Judge quality on tau2-bench runs")
    expected = sorted(
        (c for c in flagged if fired - rule.window <= judged_at[c] < fired),
        key=lambda c: judged_at[c],
        reverse=True,
    )
    assert [r["conversation_id"] for r in rows] == expected[:3]
    for r in rows:
        detail = json.loads(r["detail"])
        assert detail["judge"] == "det.authorization"
        sentences = [c["sentence"] for c in detail["evidence"]["claims"]]
        assert r["reason"].startswith("det.authorization: claims")
        assert any(s[:40] in r["reason"] for s in sentences)


# --- gate -------------------------------------------------------------------------------------


def _gate_window(
    rule: str, fired: datetime, agent: str
) -> dict[str, tuple[str, datetime, str, float, str | None]]:
    lo = fired - RULES.rule(rule).window
    return {c: g for c, g in TRUTH.gate.items() if g[0] == agent and lo <= g[1] < fired}


def test_gate_escalation_exemplars_are_the_latest_escalations(walked: str) -> None:
    _, fired, rows = first_episode(walked, "gate_escalation_rate", "gate-cautious")
    mine = _gate_window("gate_escalation_rate", fired, "gate-cautious")
    latest = sorted((g[1], c) for c, g in mine.items() if g[2] == "escalate")[::-1]
    assert [r["conversation_id"] for r in rows] == [c for _, c in latest[:3]]
    assert all(r["reason"].startswith("escalate at confidence") for r in rows)


def test_gate_proceeded_failure_exemplars_are_the_most_confident_failures(walked: str) -> None:
    _, fired, rows = first_episode(walked, "gate_proceeded_failures", "gate-over")
    mine = _gate_window("gate_proceeded_failures", fired, "gate-over")
    assert len(mine) > CANDIDATES  # the bound is in play: the latest 500 decisions count
    latest = sorted(((g[1], c) for c, g in mine.items()), reverse=True)[:CANDIDATES]
    failed = sorted(
        (mine[c][3] for _, c in latest if mine[c][2] == "proceed" and not answer(c)[3]),
        reverse=True,
    )
    assert len(rows) == 3
    assert [TRUTH.gate[r["conversation_id"]][3] for r in rows] == failed[:3]
    assert all(r["reason"].endswith("failed") for r in rows)


@pytest.mark.parametrize("rule", ["gate_degraded", "gate_fail_open"])
def test_gate_degraded_exemplars_are_the_latest_fallbacks(walked: str, rule: str) -> None:
    _, fired, rows = first_episode(walked, rule, "gate-slow")
    mine = _gate_window(rule, fired, "gate-slow")
    latest = sorted((g[1], c) for c, g in mine.items() if g[4] and g[4].startswith("fail open"))
    assert [r["conversation_id"] for r in rows] == [c for _, c in latest[::-1][:3]]
    assert all("degraded: fail open: checks took" in r["reason"] for r in rows)


def test_every_default_rule_on_conversations_fired_with_exemplars(walked: str) -> None:
    """The tests above cover every default rule but the pipeline's (test below)."""
    fired = {r["rule"] for r in _rows(walked, "SELECT DISTINCT rule FROM alert_exemplars")}
    pipeline = {"dlq_rate", "consumer_lag", "ingest_stalled"}
    assert fired == {r.name for r in RULES.rules} - pipeline


# --- notifications, promotion, retention ------------------------------------------------------


def test_outbox_payloads_carry_each_firing_members_exemplars(walked: str) -> None:
    stored: dict[str, list[dict[str, Any]]] = {}
    for r in _rows(
        walked, "SELECT fingerprint, fired_at, rank, conversation_id, reason FROM alert_exemplars"
    ):
        key = episode_key(r["fingerprint"], r["fired_at"])
        stored.setdefault(key, []).append(
            {"rank": r["rank"], "conversation_id": r["conversation_id"], "reason": r["reason"]}
        )
    seen = 0
    for row in _rows(walked, "SELECT payload FROM notification_outbox"):
        payload = json.loads(row["payload"])
        for n in payload["notifications"]:
            fired = datetime.fromisoformat(n["fired_at"])
            key = episode_key(n["fingerprint"], fired)
            carried = payload.get("exemplars", {}).get(f"{n['fingerprint']}:{n['fired_at']}")
            if n["kind"] == "resolved":
                assert carried is None
            elif key in stored:
                assert carried == sorted(stored[key], key=lambda x: x["rank"])
                seen += 1
    assert seen >= len({r.name for r in RULES.rules}) - 3  # a firing page per rule at least


def _exemplar_conversations(url: str, rule: str) -> list[str]:
    return [
        r["conversation_id"]
        for r in _rows(url, "SELECT conversation_id FROM alert_exemplars WHERE rule = $1", rule)
    ]


def _all_exemplars(url: str) -> set[str]:
    return {
        r["conversation_id"]
        for r in _rows(url, "SELECT conversation_id FROM alert_exemplars")
        if r["conversation_id"]
    }


def test_exemplars_outside_the_sample_were_promoted(walked: str) -> None:
    cids = _exemplar_conversations(walked, "ece_tier3")
    facts = _rows(
        walked,
        "SELECT c.conversation_id, c.sampled_by_rate, bool_and(e.kept) AS kept, count(e.*) AS n"
        " FROM conversations c JOIN events e ON e.conversation_id = c.conversation_id"
        " WHERE c.conversation_id = ANY($1::text[]) GROUP BY 1, 2",
        cids,
    )
    assert {f["conversation_id"] for f in facts} == set(cids)
    assert all(f["kept"] and f["n"] == 2 for f in facts)
    assert any(not f["sampled_by_rate"] for f in facts)  # at 20 %: most were outside
    # over-t3's conversations outside the sample whose events are kept: its exemplars alone
    kept = _rows(
        walked,
        "SELECT DISTINCT e.conversation_id FROM events e JOIN conversations c"
        " ON c.conversation_id = e.conversation_id"
        " WHERE c.agent_id = 'over-t3' AND NOT c.sampled_by_rate AND e.kept",
    )
    unsampled = _rows(
        walked,
        "SELECT conversation_id FROM conversations WHERE agent_id = 'over-t3'"
        " AND NOT sampled_by_rate AND conversation_id = ANY($1::text[])",
        sorted(_all_exemplars(walked)),
    )
    assert {r["conversation_id"] for r in kept} == {r["conversation_id"] for r in unsampled}


def _unsampled_over_t3(url: str, exemplars: bool) -> list[str]:
    rows = _rows(
        url,
        "SELECT conversation_id FROM conversations c WHERE agent_id = 'over-t3'"
        " AND NOT sampled_by_rate AND EXISTS (SELECT 1 FROM alert_exemplars x"
        " WHERE x.conversation_id = c.conversation_id) = $1 ORDER BY 1 LIMIT 3",
        exemplars,
    )
    return [r["conversation_id"] for r in rows]


async def test_a_later_event_of_an_exemplar_goes_straight_to_the_kept_leaf(walked: str) -> None:
    async with database_copy(walked, "mon_ex") as url:
        exemplar = (await asyncio.to_thread(_unsampled_over_t3, url, True))[0]
        other = (await asyncio.to_thread(_unsampled_over_t3, url, False))[0]
        who, ctx = Agent(id="over-t3"), Context(domain="qa", tier=3)
        later = WALK_TO + timedelta(minutes=6)  # past the groups' interval
        writer = EventWriter(url, policy=data.POLICY)
        try:
            await writer.write(
                [event_row(data.message(c, 9, later, who, ctx, 0.5)) for c in (exemplar, other)]
            )
        finally:
            await writer.close()
        rows = await fetch(
            url,
            "SELECT conversation_id, kept FROM events WHERE event_id = ANY($1::text[])",
            [f"{exemplar}:9", f"{other}:9"],
        )
        assert {r["conversation_id"]: r["kept"] for r in rows} == {exemplar: True, other: False}


async def test_retention_keeps_exemplars_past_the_unsampled_window_and_every_horizon(
    walked: str,
) -> None:
    async with database_copy(walked, "mon_ex") as url:

        async def count(sql: str, *args: Any) -> int:
            return int((await fetch(url, sql, *args))[0][0])

        chosen = sorted(await asyncio.to_thread(_all_exemplars, url))
        events_of = "SELECT count(*) FROM events WHERE conversation_id = ANY($1::text[])"
        before = {
            "events": await count(events_of, chosen),
            "exemplars": await count("SELECT count(*) FROM alert_exemplars"),
            "history": await count("SELECT count(*) FROM alert_history"),
            "verdicts": await count(
                "SELECT count(*) FROM verdicts WHERE conversation_id = ANY($1::text[])", chosen
            ),
        }
        assert before["verdicts"] > 0  # the judge exemplars' verdicts
        other = await asyncio.to_thread(_unsampled_over_t3, url, False)
        assert await count(events_of, other) == 2 * len(other)
        wall = datetime.now(UTC)
        engine = make_engine(url)
        try:
            window = RetentionSettings(retention_unsampled_hours=48)
            past_window = await run_retention(engine, window, wall + timedelta(hours=49))
            assert past_window.unsampled_emptied > 0 and not past_window.failed
            assert await count(events_of, chosen) == before["events"]  # transcripts kept
            assert await count(events_of, other) == 0  # the others' are gone
            # past every horizon (events 30 days, conversations and verdicts 90)
            report = await run_retention(engine, RetentionSettings(), wall + timedelta(days=200))
            assert not report.failed and report.deleted["conversations"] > 0
        finally:
            await engine.dispose()
        assert await count("SELECT count(*) FROM alert_exemplars") == before["exemplars"]
        assert await count("SELECT count(*) FROM alert_history") == before["history"]
        kept = await fetch(url, "SELECT conversation_id FROM conversations")
        assert {r["conversation_id"] for r in kept} == set(chosen)
        assert (
            await count(
                "SELECT count(*) FROM verdicts WHERE conversation_id = ANY($1::text[])", chosen
            )
            == before["verdicts"]
        )
        assert await count("SELECT count(*) FROM verdicts") == before["verdicts"]


# --- the pipeline's rules, at the wall clock ----------------------------------------------------

PIPELINE = ("dlq_rate", "consumer_lag", "ingest_stalled")


def _pipeline_batch(start: datetime, n: int, tag: str) -> tuple[list[Any], list[DeadLetter]]:
    """``n`` real answers of over-t3 from ``start`` (a second apart), and a dead letter for
    every tenth: the same answer's event with a confidence above 1, its ts dropped, or an old
    schema (real validation failures of real bytes)."""
    answers = [(a, at, c, y) for a, at, c, y in TRUTH.answers.values() if a == "over-t3"][:n]
    who, ctx = Agent(id="over-t3"), Context(domain="qa", tier=3)
    rows, dead = [], []
    for i, (_, _, conf, y) in enumerate(answers):
        cid = f"pipe-{tag}-{i:04d}"
        at = start + timedelta(seconds=i)
        msg = data.message(cid, 0, at, who, ctx, conf)
        rows += [event_row(msg), event_row(data.outcome(cid, 1, at, who, ctx, bool(y)))]
        if i % 10 == 0:
            body = msg.to_dict()
            broken = [
                {**body, "message": {**body["message"], "confidence": 1.0 + conf}},
                {k: v for k, v in body.items() if k != "ts"},
                {**body, "schema": "agent-event/v0"},
            ][i // 10 % 3]
            raw = json.dumps(broken).encode()
            with pytest.raises(InvalidEvent) as caught:
                decode_event(raw)
            exc = caught.value
            dead.append(DeadLetter("agent-events", 0, i, exc.reason, exc.field, exc.detail, raw))
    return rows, dead


async def test_pipeline_rules_fire_and_name_the_dead_letters(database_url: str) -> None:
    rules = RULES.model_copy(update={"rules": tuple(RULES.rule(n) for n in PIPELINE)})
    writer = EventWriter(database_url)
    engine = make_engine(database_url)
    lag, stall = (lambda: 50_000.0), (lambda: 600.0)
    try:
        rows, dead = _pipeline_batch(datetime.now(UTC) - timedelta(minutes=3), 150, "a")
        await writer.write(rows, dead)
        first = datetime.now(UTC) + timedelta(seconds=1)
        r1 = await evaluate_once(engine, rules, first, ["webhook"], lag=lag, stall=stall)
        assert len(r1.pending) == 3 and r1.exemplars == 0
        await asyncio.sleep(max(0.0, (first - datetime.now(UTC)).total_seconds()) + 0.2)
        rows, dead = _pipeline_batch(datetime.now(UTC) - timedelta(minutes=2), 150, "b")
        await writer.write(rows, dead)  # ingested after the first evaluation
        second = first + timedelta(minutes=5)
        r2 = await evaluate_once(engine, rules, second, ["webhook"], lag=lag, stall=stall)
    finally:
        await writer.close()
        await engine.dispose()
    states = await fetch(database_url, "SELECT rule, status FROM alert_states")
    assert {r["rule"]: r["status"] for r in states} == {n: "firing" for n in PIPELINE}
    assert r2.exemplars == 3
    found = await fetch(
        database_url,
        "SELECT x.rule, x.rank, x.conversation_id, x.reason, d.id, d.received_at"
        " FROM alert_exemplars x"
        " JOIN dead_letters d ON d.id = (x.detail->>'dead_letter_id')::bigint ORDER BY x.rank",
    )
    latest = await fetch(
        database_url,
        "SELECT id, raw FROM dead_letters WHERE received_at >= $1"
        " ORDER BY received_at DESC, id DESC LIMIT 3",
        second - timedelta(minutes=5),
    )
    assert {r["rule"] for r in found} == {"dlq_rate"}  # lag and stall: no stored conversation
    assert [r["id"] for r in found] == [r["id"] for r in latest]
    for r, d in zip(found, latest, strict=True):
        assert r["reason"].startswith(f"dead letter {d['id']}: ")
        named = json.loads(d["raw"]).get("conversation_id")
        assert r["conversation_id"] == named and named.startswith("pipe-b-")


# --- what a person sees: notifications and `monitor alerts show` ------------------------------

DASH = "http://grafana.example:3000"


async def _firing_payload(url: str, rule: str, agent: str) -> tuple[dict[str, Any], list[str]]:
    """The first outbox payload announcing ``rule`` firing for ``agent``, and the ids of that
    episode's exemplars."""
    for row in await fetch(url, "SELECT payload FROM notification_outbox ORDER BY id"):
        payload = json.loads(row["payload"])
        for n in payload["notifications"]:
            if n["rule"] == rule and n["scope"]["agent"] == agent and n["kind"] == "firing":
                found = payload["exemplars"][f"{n['fingerprint']}:{n['fired_at']}"]
                return payload, [x["conversation_id"] for x in found]
    raise AssertionError(f"no firing notification of {rule} for {agent}")


async def test_notifications_carry_the_exemplars_redacted(walked: str, alertmanager: str) -> None:
    """over-t3's wrong answers quote an email, a token and an API key: Slack, the webhook and
    Alertmanager get each exemplar (id, why, the Conversation dashboard link, the command),
    and none of the three."""
    payload, ids = await _firing_payload(walked, "ece_tier3", "over-t3")
    assert len(ids) == 3
    now = datetime.now(UTC)
    async with WebhookReceiver("whsec-ex-0123456789") as hook, SlackServer() as slack:
        assert isinstance(hook, WebhookReceiver) and isinstance(slack, SlackServer)
        sinks = [
            WebhookSink(hook.url, hook.secret, dashboard_url=DASH),
            SlackSink(slack.token, slack.channel, DASH, base_url=f"{slack.base_url}/api/"),
            AlertmanagerSink(alertmanager, DASH),
        ]
        for sink in sinks:
            got = await sink.deliver(payload, DeliveryContext(payload["idempotency_key"], 1, now))
            assert got.ok, got.error
            await sink.aclose()
        async with httpx.AsyncClient() as client:
            shown = (await client.get(f"{alertmanager}/api/v2/alerts")).json()
        seen = {
            "webhook": json.dumps(hook.accepted[0].body),
            "slack": json.dumps(slack.posts[-1].body),
            "alertmanager": json.dumps(
                [a for a in shown if a["labels"]["alertname"] == "ece_tier3"]
            ),
        }
    for where, text in seen.items():
        for cid in ids:
            assert f"monitor conversation {cid}" in text, where
            assert f"{DASH}/d/monitor-conversation?var-conversation={cid}" in text, where
        assert "[email] with token=[secret]" in text, where
        assert not any(s in text for s in data.LEAKED), where


def test_alerts_show_prints_what_fired_evidence_exemplars_and_next_commands(
    walked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONITOR_DATABASE_URL", walked)
    monkeypatch.delenv("MONITOR_DATABASE_READ_URL", raising=False)
    fp, fired, rows = first_episode(walked, "ece_tier3", "over-t3")
    runner = CliRunner()
    done = runner.invoke(app, ["alerts", "show", fp[:8]], env={"COLUMNS": "100"})
    assert done.exit_code == 0, done.output
    out = done.output
    assert out.startswith(
        f"ece_tier3 agent=over-t3, domain=qa, tier=3: firing (critical)  fingerprint {fp}"
    )
    assert (
        "Calibration error 0." in out
        and ", at least 0." in out
        and "when it fired: ece (99% lower bound)" in out
    )
    assert "window 1h (evidence up to 6h)" in out
    for r in rows:
        assert f"{r['rank']}. {r['conversation_id']}  failed (outcome:ground_truth)" in out
        assert f"  monitor conversation {r['conversation_id']}\n" in out
    assert "monitor calibration --agent over-t3 --domain qa --tier 3 --since 1h" in out
    assert "runbook: docs/runbooks.md#calibration-error" in out
    assert not any(s in out for s in data.LEAKED) and "[email]" in out
    as_json = json.loads(runner.invoke(app, ["alerts", "show", fp, "--json"]).output)
    assert as_json["fingerprint"] == fp and as_json["status"] == "firing"
    assert datetime.fromisoformat(as_json["fired_at"]) == fired
    assert [x["conversation_id"] for x in as_json["exemplars"]] == [
        r["conversation_id"] for r in rows
    ]
    assert as_json["evidence"]["when_fired"]["value"] > 0.05
    assert as_json["next"][0] == f"monitor conversation {rows[0]['conversation_id']}"
    missing = runner.invoke(app, ["alerts", "show", "ffffffff"])
    assert missing.exit_code == 1 and "no alert matches 'ffffffff'" in missing.output


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _incident_of(url: str, agent: str) -> tuple[str, list[str]]:
    """The first incident of ``agent``: its id and its member fingerprints in order."""
    found = _rows(
        url,
        "SELECT id, state FROM alert_incidents WHERE incident_key = $1 ORDER BY opened_at LIMIT 1",
        f"agent={agent}",
    )
    assert found, f"no incident for {agent}"
    state = _json(found[0]["state"])
    return found[0]["id"], [m["fingerprint"] for m in state["members"]]


def test_alerts_list_show_and_ack_lead_to_transcripts_and_take_an_incident_id(
    walked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``alerts list`` names, per firing alert, the command that prints its first exemplar's
    transcript; ``alerts show inc-...`` prints the incident, then each of its alerts with its
    exemplars; ``alerts ack inc-...`` acknowledges every firing alert of it (on a copy)."""
    monkeypatch.delenv("MONITOR_DATABASE_READ_URL", raising=False)
    monkeypatch.setenv("MONITOR_DATABASE_URL", walked)
    inc, members = _incident_of(walked, "over-t3")
    assert len(members) >= 2  # ece, overconfidence and Brier of one agent: one incident
    runner = CliRunner()
    done = runner.invoke(app, ["alerts", "show", inc[:10]], env={"COLUMNS": "100"})
    assert done.exit_code == 0, done.output
    out = done.output
    assert out.startswith(f"incident {inc} agent=over-t3: ")
    for fp in members:
        assert f"  fingerprint {fp}" in out
    fp, _, rows = first_episode(walked, "ece_tier3", "over-t3")
    assert fp in members
    for r in rows:
        assert f"monitor conversation {r['conversation_id']}" in out
    assert not any(s in out for s in data.LEAKED)
    as_json = json.loads(runner.invoke(app, ["alerts", "show", inc, "--json"]).output)
    assert as_json["incident"]["id"] == inc
    assert [a["fingerprint"] for a in as_json["alerts"]] == members
    firing = [a["fingerprint"] for a in as_json["alerts"] if a["status"] == "firing"]
    assert firing and (f"monitor alerts ack {inc} --comment '...'" in as_json["next"])
    listed = runner.invoke(app, ["alerts", "list"], env={"COLUMNS": "100"})
    assert listed.exit_code == 0, listed.output
    first = f"monitor conversation {rows[0]['conversation_id']}   # ece_tier3 agent=over-t3,"
    assert first in listed.output and inc in listed.output
    listed_json = json.loads(runner.invoke(app, ["alerts", "list", "--json"]).output)
    (row,) = [a for a in listed_json["alerts"] if a["fingerprint"] == fp]
    assert [x["conversation_id"] for x in row["exemplars"]] == [r["conversation_id"] for r in rows]
    assert not any(s in listed.output for s in data.LEAKED)
    missing = runner.invoke(app, ["alerts", "show", "inc-ffffffff"])
    assert missing.exit_code == 1 and "no incident matches 'inc-ffffffff'" in missing.output

    copy = asyncio.run(copy_database(walked, "mon_ack"))
    try:
        monkeypatch.setenv("MONITOR_DATABASE_URL", copy)
        acked = runner.invoke(app, ["alerts", "ack", inc, "--by", "oncall", "--comment", "x"])
        assert acked.exit_code == 0, acked.output
        assert sorted(acked.output.split("\n")[:-1]) == sorted(
            f"acknowledged {f} ({a['rule']}) by oncall"
            for a in as_json["alerts"]
            for f in [a["fingerprint"]]
            if f in firing
        )
        states = _rows(
            copy, "SELECT fingerprint, state FROM alert_states WHERE fingerprint = ANY($1)", members
        )
        by_fp = {r["fingerprint"]: _json(r["state"]) for r in states}
        assert all(by_fp[f]["acked_by"] == "oncall" for f in firing)
        again = runner.invoke(app, ["alerts", "ack", inc, "--by", "oncall"])
        assert again.exit_code == 1 and "no unacknowledged firing alert" in again.output
    finally:
        asyncio.run(drop_database(copy))


def _at_once(name: str) -> RuleSet:
    """ece_tier3 renamed (a new alert) that fires at its first breach, paging at once."""
    rule = RULES.rule("ece_tier3").model_copy(update={"name": name, "for_": timedelta(0)})
    return RULES.model_copy(update={"rules": (rule,), "group_wait": timedelta(0)})


async def test_a_failure_to_choose_exemplars_never_costs_a_page(
    walked: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> list[Any]:
        raise RuntimeError("a bug in a pick rule")

    async with engine_on_copy(walked, "mon_ex") as (url, engine):
        with monkeypatch.context() as patched:
            patched.setattr(exemplar_repo, "choose", broken)
            report = await evaluate_once(engine, _at_once("ece_now"), WALK_TO, ["webhook"])
        # both tier-3 agents fire, one page each (grouped by agent)
        assert len(report.firing) == 2 and report.outbox_rows == 2 and report.exemplars == 0
        assert "alert exemplars not stored; the alerts page without them" in caplog.text
        pages = await fetch(
            url, "SELECT payload FROM notification_outbox WHERE payload::text LIKE '%ece_now%'"
        )
        assert len(pages) == 2
        assert not any("exemplars" in json.loads(p["payload"]) for p in pages)
        # the same, working: both firing tier-3 agents get theirs, in their pages
        later = WALK_TO + timedelta(minutes=6)  # past the groups' interval
        again = await evaluate_once(engine, _at_once("ece_again"), later, ["webhook"])
        assert again.exemplars == 6
        pages = await fetch(
            url, "SELECT payload FROM notification_outbox WHERE payload::text LIKE '%ece_again%'"
        )
        assert [len(json.loads(p["payload"])["exemplars"]) for p in pages] == [1, 1]
