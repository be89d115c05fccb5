"""The analytics CLI (``--json``) on a real Postgres seeded with simulator and tau2 traffic.

The database is filled through the ingest writer (the same transaction the worker runs), then
every number the CLI prints is checked against an independent computation from the raw events
the test generated, and the simulator's agents against the behaviour they were built with.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss
from typer.testing import CliRunner

from monitor.analytics.bins import BinSums
from monitor.analytics.calibration import ece
from monitor.cli.main import app
from monitor.contract.events import AgentEvent
from monitor.replay.tau2 import tau2_file_events
from monitor.sim.traffic import Simulator, default_agents
from tests.seeding import seeded_database

N_CONV = 2400
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
START = NOW - timedelta(seconds=5 * N_CONV)  # 3 h 20 min of simulated traffic
CHANGE = START + timedelta(seconds=5 * N_CONV / 2)


def simulator() -> Simulator:
    return Simulator(11, START, default_agents(CHANGE))


#: the tests share a module fixture: one xdist process makes it (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("analytics-cli")


@pytest.fixture(scope="module")
def seeded(migrated_template_url: str, tau2_files) -> Iterator[tuple[str, list[AgentEvent]]]:
    events = list(simulator().events(N_CONV))
    tau2 = [e for f in tau2_files for e in tau2_file_events(f)]
    with seeded_database(migrated_template_url, "mon_an", events + tau2) as url:
        yield url, events + tau2


def cli(url: str, *args: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"], env={"MONITOR_DATABASE_URL": url})
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def raw_items(events: list[AgentEvent], lo: datetime, hi: datetime) -> dict[str, tuple]:
    """Independent: per agent (conf, y) of assistant messages with a confidence in [lo, hi),
    labelled with their conversation's outcome."""
    outcome = {e.conversation_id: e.outcome.success for e in events if e.outcome is not None}
    per: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for e in events:
        m = e.message
        if m is None or m.role != "assistant" or m.confidence is None or not lo <= e.ts < hi:
            continue
        if e.conversation_id in outcome:
            per[e.agent.id][0].append(m.confidence)
            per[e.agent.id][1].append(1.0 if outcome[e.conversation_id] else 0.0)
    return {a: (np.array(c), np.array(y)) for a, (c, y) in per.items()}


def test_calibration_numbers_equal_direct_computation(seeded):
    url, events = seeded
    lo, hi = START - timedelta(hours=1), NOW + timedelta(hours=1)
    out = cli(url, "calibration", "--from", lo.isoformat(), "--to", hi.isoformat())
    direct = raw_items(events, lo, hi)
    assert set(out["agents"]) == set(direct) | {"*"}
    for agent, (c, y) in direct.items():
        got = out["agents"][agent]
        assert got["count"] == len(c)
        assert got["ece"] == pytest.approx(ece(BinSums.from_items(c, y)), abs=1e-9)
        assert got["brier"] == pytest.approx(brier_score_loss(y, c), abs=1e-9)
        assert got["accuracy"] == pytest.approx(y.mean(), abs=1e-9)
        assert got["mean_confidence"] == pytest.approx(c.mean(), abs=1e-9)
        assert got["meaningful"] is True
        lo_ci, hi_ci = got["ece_ci"]
        assert lo_ci <= got["ece"] + 0.02 and got["ece"] - 0.02 <= hi_ci
    # the simulator's truth: calibrated is calibrated, overconfident is overconfident
    agents = out["agents"]
    assert agents["sim-airline-calibrated"]["ece"] < 0.08
    assert agents["sim-retail-overconfident"]["ece"] > 0.2
    assert agents["sim-retail-overconfident"]["overconfidence_gap"] > 0.2
    # a small scope is reported but flagged as not meaningful
    small = cli(
        url,
        "calibration",
        "--agent",
        "sim-airline-c*",
        "--from",
        (NOW - timedelta(minutes=3)).isoformat(),
        "--to",
        NOW.isoformat(),
    )
    rep = small["agents"]["sim-airline-calibrated"]
    assert rep["meaningful"] is False and "min_samples" in rep["reason"]


def test_drift_fires_after_change_point_only(seeded):
    url, _ = seeded
    before = cli(
        url, "drift", "--recent", "40m", "--at", (CHANGE - timedelta(minutes=5)).isoformat()
    )
    after = cli(
        url, "drift", "--recent", "40m", "--at", (CHANGE + timedelta(minutes=40)).isoformat()
    )
    fired_before = {c["agent_id"] for c in before["checks"] if c["fired"]}
    fired_after = {c["agent_id"] for c in after["checks"] if c["fired"]}
    assert fired_before == set()
    assert fired_after == {"sim-telecom-drifting"}
    drifting = next(c for c in after["checks"] if c["agent_id"] == "sim-telecom-drifting")
    assert drifting["accuracy_recent"] < drifting["accuracy_baseline"]
    assert drifting["n_recent"] >= 100 and drifting["n_baseline"] >= 100
    # where there is no data it says why and where to look instead
    env = {"MONITOR_DATABASE_URL": url}
    empty = CliRunner().invoke(
        app, ["drift", "--no-store", "--at", "2001-01-01T00:00:00Z"], env=env
    )
    said = " ".join(empty.output.split())
    assert empty.exit_code == 0, said
    assert "no labelled items in the recent window (2000-12-31 23:00 to 00:00 UTC)" in said
    newest = re.search(r"look back with --at (\S+) \(the end of the recent window\)", said)
    assert newest, said
    again = cli(url, "drift", "--no-store", "--at", newest[1])
    assert again["checks"], "the suggested --at finds the data"


def test_escalation_inversion_only_for_the_inverted_agent(seeded):
    url, events = seeded
    lo, hi = START, NOW + timedelta(hours=1)
    out = cli(url, "escalation", "--from", lo.isoformat(), "--to", hi.isoformat())
    sims = {a: s for a, s in out["agents"].items() if a.startswith("sim-")}
    inverted = {a for a, s in sims.items() if s["inversion"]["inverted"]}
    assert inverted == {"sim-airline-inverted"}
    convs = defaultdict(set)
    escalated = defaultdict(set)
    for e in events:
        if e.agent.id in sims and lo <= e.ts:
            convs[e.agent.id].add(e.conversation_id)
            if e.escalation is not None:
                escalated[e.agent.id].add(e.conversation_id)
    for agent, s in sims.items():
        assert s["conversations"] == len(convs[agent])
        assert s["escalated"] == len(escalated[agent])
        assert s["timing"]["median_turns"] is not None


def test_thresholds_recommendation_meets_target(seeded):
    url, _ = seeded
    out = cli(
        url,
        "thresholds",
        "--from",
        START.isoformat(),
        "--to",
        NOW.isoformat(),
        "--agent",
        "sim-airline-calibrated",
        "--target",
        "0.3",
    )
    agent = out["agents"]["sim-airline-calibrated"]
    rec = agent["advice"]
    assert rec["threshold"] is not None
    assert rec["residual_error"]["value"] <= 0.3
    rates = [r["escalation_rate"] for r in agent["rows"]]
    assert rates == sorted(rates) and rates[0] == 0.0


def test_passk_on_tau2_equals_direct_computation(seeded, tau2_files):
    url, _ = seeded
    out = cli(url, "passk", "--agent", "*", "--k", "1", "--k", "2")
    # independent: straight from the result files (one agent per file)
    for f in tau2_files:
        agent = tau2_file_events(f)[0].agent.id
        by_task: dict[str, list[bool]] = defaultdict(list)
        for sim in json.loads(f.read_text())["simulations"]:
            reward = (sim.get("reward_info") or {}).get("reward")
            if reward is not None:
                by_task[str(sim["task_id"])].append(reward >= 1.0)
        assert by_task
        for k in (1, 2):
            per_task = [
                math.comb(sum(v), k) / math.comb(len(v), k) for v in by_task.values() if len(v) >= k
            ]
            got = out[str(k)][agent]
            assert got["pass_hat_k"] == pytest.approx(sum(per_task) / len(per_task), abs=1e-12)
            assert got["n_tasks"] == len(per_task)
    # --since/--from/--to select trials by when their conversation started
    old = ["--from", "2001-01-01T00:00:00+00:00", "--to", "2001-01-02T00:00:00+00:00"]
    assert cli(url, "passk", "--agent", "*", "--k", "1", *old) == {"1": {}}
    wide = ["--from", "2001-01-01T00:00:00+00:00", "--to", "2100-01-01T00:00:00+00:00"]
    assert cli(url, "passk", "--agent", "*", "--k", "1", "--k", "2", *wide) == out
    empty = CliRunner().invoke(app, ["passk", *old], env={"MONITOR_DATABASE_URL": url})
    assert empty.exit_code == 0 and "no conversations with a task id and an outcome in" in (
        " ".join(empty.output.split())
    )


def test_recalibration_fit_show_and_lower_ece(seeded):
    url, _ = seeded
    fit_cmd = ("calibration", "fit", "--agent", "sim-retail-overconfident")
    window = ("--from", START.isoformat(), "--to", NOW.isoformat())
    fit = cli(url, *fit_cmd, *window)
    assert len(fit) == 1 and fit[0]["stored"] is True
    assert fit[0]["ece_after"] < fit[0]["ece_before"] / 2
    shown = cli(url, "calibration", "show", "sim-retail-overconfident")
    assert shown["maps"][0]["version"] == 1
    xs, ys = shown["maps"][0]["map"]["xs"], shown["maps"][0]["map"]["ys"]
    assert ys == sorted(ys) and len(xs) == len(ys) >= 2
    again = cli(url, *fit_cmd, *window)
    assert again[0]["stored"] is True
    assert cli(url, "calibration", "show", "sim-retail-overconfident")["maps"][0]["version"] == 2


def test_periodic_drift_job_stores_each_check_once(seeded):
    from monitor.analytics.periodic import drift_once
    from monitor.core.clock import FixedClock
    from monitor.store.engine import make_engine

    url, _ = seeded
    clock = FixedClock(CHANGE + timedelta(minutes=40))

    async def go() -> tuple[int, int, int]:
        engine = make_engine(url)
        try:
            fired = await drift_once(engine, clock, timedelta(minutes=40), 0.01, 100)
            again = await drift_once(engine, clock, timedelta(minutes=40), 0.01, 100)
            async with engine.connect() as conn:
                from sqlalchemy import text

                # the periodic job's checks: against the 24 h pinned reference (the CLI tests
                # above stored checks of the same recent window against the previous period)
                rows = (
                    await conn.execute(
                        text(
                            "SELECT agent_id, fired FROM drift_checks WHERE recent_to = :t"
                            " AND baseline_to - baseline_from = interval '24 hours'"
                        ),
                        {"t": CHANGE + timedelta(minutes=40)},
                    )
                ).all()
        finally:
            await engine.dispose()
        sims = [r for r in rows if r[0].startswith("sim-")]
        return fired, again, len(sims)

    fired, again, stored = asyncio.run(go())
    assert (fired, again, stored) == (1, 1, 4)
