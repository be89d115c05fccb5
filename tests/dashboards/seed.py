"""A database seeded like production for the dashboard and report tests.

``seed`` writes, through the real write paths: both tau2 runs, three hours of simulator
traffic up to now and 300 conversations of agents that ask the gate (every 7th does not),
with their decision events (``seed_gate``) (``EventWriter``: events, conversations, items,
calibration bins), dead letters from real validation failures, drift checks
(``flows.analytics.run_drift``), recalibration maps (``flows.analytics.fit_maps``), judge
verdicts (the deterministic judges on real conversations plus rubric-judge verdicts, some of
them errors, through ``judge_repo.write_verdicts``), the judges' labelling decisions as the
worker measures them (``refresh_judge_quality`` at the default floor) and alert states, history
and incidents (rows as the alert evaluation stores them).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

from monitor.alerts.incidents import Incident, Member, incident_id
from monitor.alerts.states import AlertState, Status, fingerprint
from monitor.analytics import reports as fa
from monitor.analytics.repo import Segment
from monitor.contract.events import AgentEvent
from monitor.ingest.rows import DeadLetter, event_row
from monitor.ingest.writer import EventWriter
from monitor.judges.base import Conversation, Verdict
from monitor.judges.deterministic import run_all
from monitor.judges.quality import DEFAULT_FLOOR_MIN_PAIRS, DEFAULT_PRECISION_FLOOR
from monitor.judges.quality_repo import refresh_judge_quality
from monitor.judges.repo import write_verdicts
from monitor.replay.tau2 import tau2_file_events
from monitor.sim.traffic import Simulator
from monitor.store.engine import libpq_url, make_engine
from tests.dashboards.seed_gate import gated_events

N_CONVERSATIONS = 2000  # at 5 s apart: 2 h 47 min of traffic
N_GATED = 300  # gated agents' conversations (seed_gate.py), 30 s apart; every 7th not gated,
# every 5th decided in shadow mode


def simulated_events(now: datetime) -> list[AgentEvent]:
    return list(Simulator(seed=7, start=now - timedelta(hours=3)).events(N_CONVERSATIONS))


async def seed(
    database_url: str, tau2_files: Sequence[Path], dead_letters: Sequence[DeadLetter] = ()
) -> list[AgentEvent]:
    """Seed everything (see the module docstring); returns the events written."""
    now = datetime.now(UTC)
    events = [e for path in tau2_files for e in tau2_file_events(path)]
    events += simulated_events(now)
    events += gated_events(now - timedelta(hours=3), N_GATED, ungated_every=7, shadow_every=5)[0]
    rows = [event_row(e) for e in events]
    writer = EventWriter(database_url)
    try:
        for i in range(0, len(rows), 5000):  # the ingest loop's default batch size
            await writer.write(rows[i : i + 5000])
        await writer.write([], dead_letters)
    finally:
        await writer.close()
    await seed_verdicts(database_url, events)
    await seed_analytics(database_url, now)
    await seed_alerts(database_url, now)
    return events


async def seed_analytics(database_url: str, now: datetime) -> None:
    """Drift checks at four points (the first right across the drifting agent's change point,
    two hours before ``now``, so one check surely fires) and a recalibration map per agent."""
    engine = make_engine(database_url)
    try:
        for back in (75, 60, 30, 0):
            windows = fa.drift_windows(now - timedelta(minutes=back), timedelta(minutes=45))
            await fa.run_drift(engine, Segment(), windows, min_samples=50)
        await fa.fit_maps(
            engine, Segment(), now - timedelta(days=30), now + timedelta(minutes=1), min_items=100
        )
    finally:
        await engine.dispose()


def _unit(*parts: str) -> float:
    digest = hashlib.sha256("|".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


RUBRIC_CATEGORIES = ("wrong_information", "fabrication", "policy_violation", "fabrication")
FABRICATION_TYPES = ("pricing", "authorization", "account", "history")


def rubric_verdicts(conv: Conversation) -> list[Verdict]:
    """What an LLM rubric judge says about a conversation: agrees with the outcome ~92% of the
    time (conversation ids, and so which ones it gets wrong, change with the time of seeding: at
    92% its pooled precision stays clear of the labelling floor whatever they are), names
    failure categories (and a fabrication type) when it says 'wrong', and errors (timeouts) on
    ~4% of the conversations."""
    cid = conv.conversation_id
    outcome = next((e.outcome.success for e in conv.events if e.outcome is not None), None)
    latency = 400 + 2600 * _unit(cid, "latency")
    if _unit(cid, "error") < 0.04:
        return [
            Verdict(
                "llm-rubric", "v1", cid, None, status="error", error="timeout", latency_ms=30000.0
            )
        ]
    ok = outcome if outcome is not None else _unit(cid, "label") < 0.7
    if _unit(cid, "agree") > 0.92:
        ok = not ok
    cats: tuple[str, ...] = ()
    if not ok:
        cat = RUBRIC_CATEGORIES[int(_unit(cid, "cat") * len(RUBRIC_CATEGORIES))]
        cats = (cat,)
        if cat == "fabrication":
            kind = FABRICATION_TYPES[int(_unit(cid, "fab") * len(FABRICATION_TYPES))]
            cats = ("fabrication", f"fabrication:{kind}")
    return [
        Verdict(
            "llm-rubric",
            "v1",
            cid,
            None,
            label=int(ok),
            score=1.0 if ok else 0.2,
            categories=cats,
            latency_ms=latency,
        )
    ]


async def seed_verdicts(database_url: str, events: Sequence[AgentEvent]) -> None:
    """Judge one conversation in three (every judge), store the verdicts, measure the judges."""
    by_conv: dict[str, list[AgentEvent]] = defaultdict(list)
    for e in events:
        by_conv[e.conversation_id].append(e)
    pool = await asyncpg.create_pool(libpq_url(database_url), min_size=1, max_size=2)
    try:
        batch: list[Verdict] = []
        agents: dict[str, str] = {}
        for i, (cid, evs) in enumerate(sorted(by_conv.items())):
            if i % 3:
                continue
            conv = Conversation.of(evs)
            agents[cid] = evs[0].agent.id
            batch += run_all(conv) + rubric_verdicts(conv)
        for lo in range(0, len(batch), 2000):
            part = batch[lo : lo + 2000]
            await write_verdicts(
                pool, {v.conversation_id: agents[v.conversation_id] for v in part}, part
            )
        await refresh_judge_quality(pool, DEFAULT_PRECISION_FLOOR, DEFAULT_FLOOR_MIN_PAIRS)
    finally:
        await pool.close()


ALERTS = (  # (rule, scope, severity, minutes ago it fired, minutes ago it resolved or None)
    ("ece_tier1", {"agent": "sim-retail-overconfident", "tier": "1"}, "warning", 100, None),
    ("escalation_inverted", {"agent": "sim-airline-inverted"}, "critical", 80, None),
    (
        "drift",
        {"agent": "sim-telecom-drifting", "domain": "telecom", "tier": "3"},
        "critical",
        50,
        20,
    ),
)


def incident_of(rule: str, scope: dict[str, str], severity: str, now: datetime) -> Incident:
    """The incident a seeded alert opened (one per alert: each agent has one alert)."""
    row = next(a for a in ALERTS if a[0] == rule)
    at = now - timedelta(minutes=row[3])
    end = None if row[4] is None else now - timedelta(minutes=row[4])
    key = f"agent={scope['agent']}"
    fp = fingerprint(rule, scope)
    return Incident(
        incident_id(key, at),
        key,
        {"agent": scope["agent"]},
        at,
        severity,
        severity,
        (Member(fp, rule, severity, at),),
        () if end else (fp,),
        end,
    )


async def seed_alerts(database_url: str, now: datetime) -> None:
    """Two firing alerts and one resolved one, with their history; each opened an incident."""
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        for rule, scope, severity, fired, resolved in ALERTS:
            inc = incident_of(rule, scope, severity, now)
            await conn.execute(
                "INSERT INTO alert_incidents (id, incident_key, labels, status, severity,"
                " opened_at, resolved_at, members, pages, state, version)"
                " VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7, $8::jsonb, 1, $9::jsonb, 0)",
                inc.id,
                inc.key,
                json.dumps(dict(inc.labels)),
                inc.status,
                severity,
                inc.opened_at,
                inc.resolved_at,
                json.dumps([m.fingerprint for m in inc.members]),
                json.dumps(inc.to_dict()),
            )
            fp = fingerprint(rule, scope)
            at = now - timedelta(minutes=fired)
            end = now - timedelta(minutes=resolved) if resolved is not None else None
            status = Status.RESOLVED if end else Status.FIRING
            state = AlertState(
                fp,
                rule,
                scope,
                status,
                active_since=at,
                fired_at=at,
                resolved_at=end,
                last_notified_at=at,
                notified=1,
                last_value=0.31,
                last_samples=400.0,
                last_observed_at=now,
                version=3,
            )
            await conn.execute(
                "INSERT INTO alert_states (fingerprint, rule, scope, status, state, version)"
                " VALUES ($1, $2, $3::jsonb, $4, $5::jsonb, 3)",
                fp,
                rule,
                json.dumps(scope),
                status.value,
                json.dumps(state.to_dict()),
            )
            kinds = [("firing", at)] + ([("resolved", end)] if end else [])
            for kind, when in kinds:
                await conn.execute(
                    "INSERT INTO alert_history (fingerprint, rule, kind, severity, scope, value,"
                    " threshold, summary, at, idempotency_key, incident_id)"
                    " VALUES ($1, $2, $3, $4, $5::jsonb, 0.31, 0.15, $6, $7, $8, $9)",
                    fp,
                    rule,
                    kind,
                    severity,
                    json.dumps(scope),
                    f"{rule} for {scope['agent']}: 0.31 above 0.15",
                    when,
                    f"{fp}:{kind}",
                    inc.id,
                )
    finally:
        await conn.close()
