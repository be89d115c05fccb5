"""Tracked drift checks through Postgres (monitor.analytics.periodic): a change stays
flagged, against
a reference that stays pinned in ``drift_references``, for as long as it lasts; the previous
period baseline forgets it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from monitor.analytics import reports as fa
from monitor.analytics.drift_state import load_references
from monitor.analytics.periodic import drift_once
from monitor.analytics.repo import Segment
from monitor.cli.main import app
from monitor.contract.events import AgentEvent
from monitor.core.clock import FixedClock
from monitor.sim.traffic import Simulator, default_agents
from monitor.store.engine import make_engine
from tests.seeding import seeded_database

N_CONV = 2400
END = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
START = END - timedelta(seconds=5 * N_CONV)  # 3 h 20 min
CHANGE = START + timedelta(minutes=80)  # no recovery
RECENT = timedelta(minutes=40)
DRIFTING = "sim-telecom-drifting"


def _events() -> Iterator[AgentEvent]:
    return Simulator(11, START, default_agents(CHANGE, None)).events(N_CONV)


@pytest.fixture
def seeded(migrated_template_url: str) -> Iterator[str]:
    with seeded_database(migrated_template_url, "mon_dt", _events()) as url:
        yield url


def test_a_change_stays_flagged_against_its_pinned_reference(seeded):
    async def go() -> tuple[list[tuple[datetime, int]], dict, list, bool]:
        engine = make_engine(seeded)
        try:
            fired_rounds, refs = [], []
            t = START + timedelta(minutes=60)
            while t <= END:
                n = await drift_once(engine, FixedClock(t), RECENT, 0.001, 100)
                fired_rounds.append((t, n))
                refs.append(
                    (t, (await load_references(engine)).get((DRIFTING, "1.0", "telecom", 3)))
                )
                t += timedelta(minutes=10)
            states = await load_references(engine)
            # the old baseline, the period just before the recent window, at the end
            old = await fa.run_drift(
                engine,
                Segment(agent=DRIFTING),
                fa.drift_windows(END, RECENT),
                alpha=0.01,
                store=False,
            )
            return fired_rounds, states, refs, any(c.fired for c in old.values())
        finally:
            await engine.dispose()

    rounds, states, refs, old_fired = asyncio.run(go())
    assert sum(n for _, n in rounds) >= len([r for _, r in refs if r is not None and r.flagged])
    flagged = [(t, r) for t, r in refs if r is not None and r.flagged]
    assert flagged, refs
    first = flagged[0][0]
    assert CHANGE < first <= CHANGE + 2 * RECENT
    # from the first firing check on, every check flags the change, against the same reference
    after = [(t, r) for t, r in refs if t >= first]
    assert all(r is not None and r.flagged for _, r in after), after
    pinned = {(r.ref_from, r.ref_to) for _, r in after if r is not None}
    assert len(pinned) == 1 and next(iter(pinned))[1] <= CHANGE
    assert states[(DRIFTING, "1.0", "telecom", 3)].flagged_since == flagged[0][1].flagged_since
    # the stable agents never fired
    for key, st in states.items():
        if key[0] != DRIFTING:
            assert st.flagged_since is None and st.clean_since is not None, (key, st)
    # the previous-period baseline had made the change the new normal by then
    assert not old_fired
    # `monitor drift` (ad hoc) compares with the same pinned reference, so it agrees with the
    # worker's checks and the alerts, and leaves every segment's state as it was
    env = {"MONITOR_DATABASE_URL": seeded}
    at = END - timedelta(minutes=5)  # not a round the worker ran: tracking would move the state
    args = ["drift", "--json", "--no-store", "--recent", "100m", "--at", at.isoformat()]
    out = CliRunner().invoke(app, args, env=env)
    assert out.exit_code == 0, out.output
    checks = {c["agent_id"]: c for c in json.loads(out.output)["checks"]}
    drifting = checks[DRIFTING]
    ref = states[(DRIFTING, "1.0", "telecom", 3)]
    assert drifting["fired"], drifting
    assert drifting["accuracy_recent"] < drifting["accuracy_baseline"]
    assert (
        datetime.fromisoformat(drifting["baseline_from"]),
        datetime.fromisoformat(drifting["baseline_to"]),
    ) == (ref.ref_from, ref.ref_to)
    assert not any(c["fired"] for a, c in checks.items() if a != DRIFTING)
    assert asyncio.run(_references(seeded)) == states
    # --baseline-from/--baseline-to: one pinned window for every segment (here: before the change)
    out = CliRunner().invoke(
        app,
        [
            *args,
            "--agent",
            DRIFTING,
            "--baseline-from",
            START.isoformat(),
            "--baseline-to",
            CHANGE.isoformat(),
        ],
        env=env,
    )
    assert out.exit_code == 0, out.output
    (pinned_check,) = json.loads(out.output)["checks"]
    assert pinned_check["fired"], pinned_check
    assert datetime.fromisoformat(pinned_check["baseline_from"]) == START
    assert pinned_check["n_baseline"] != drifting["n_baseline"]  # not the stored reference


async def _references(url: str) -> dict:
    engine = make_engine(url)
    try:
        return await load_references(engine)
    finally:
        await engine.dispose()
