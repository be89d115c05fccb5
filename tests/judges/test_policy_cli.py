"""``monitor judges`` on stored verdicts of the policy rules: real tau2 airline runs written to
Postgres, judged by the deterministic judges and the airline domain's rules, report per rule
and "any judge (labelling)" exactly what the offline measurement gives."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import asyncpg
from typer.testing import CliRunner

from bench.policy_recall import load
from monitor.cli.main import app
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.judges import airline
from monitor.judges import repo as judge_repo
from monitor.judges.base import Conversation
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.offline import offline_judgements
from monitor.judges.quality import ANY_JUDGE, judge_quality, labelling
from monitor.judges.runner import JudgeRunner
from monitor.store.engine import libpq_url

ROOT = Path(__file__).resolve().parents[2]


async def test_monitor_judges_reports_policy_rules_and_any_judge(database_url: str) -> None:
    files = sorted((ROOT / "tests/data/tau2").glob("*.json"))
    files.append(
        ROOT / "tests/data/tau2-results/blakeelias_2025-10-05T22-50-14.083933_airline_llm_agent_"
        "grok-3_user_simulator_grok-3.json.gz"
    )
    convs = load(files)
    runner = JudgeRunner(deterministic_judges(), domains={"airline": airline.domain()})
    writer = EventWriter(database_url)
    await writer.write([event_row(e) for evs in convs.values() for e in evs])
    await writer.close()
    verdicts = [
        v
        for evs in convs.values()
        for j in runner.judges_for(Conversation.of(evs))
        for v in j.judge(Conversation.of(evs))
    ]
    pool = await asyncpg.create_pool(libpq_url(database_url))
    try:
        agents = {cid: evs[0].agent.id for cid, evs in convs.items()}
        await judge_repo.write_verdicts(pool, agents, verdicts)
    finally:
        await pool.close()
    env = {"MONITOR_DATABASE_URL": database_url}
    # at the default floor no judge has the evidence to label these few runs; at 0.3 some do
    res = await asyncio.to_thread(
        CliRunner().invoke, app, ["judges", "--since", "3650d", "--floor", "0.3", "--json"], env=env
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    rows = {(r["judge"], r["category"]): r for r in out["quality"]}
    offline = offline_judgements(convs.values(), runner.judges_for)
    expected = {(r.judge, r.category): r for r in judge_quality(offline, floor=0.3)}
    scoped = {(d.judge, d.agent_id, d.domain): d for d in labelling(offline, floor=0.3)}
    got = {(r["judge"], r["agent_id"], r["domain"]): r for r in out["labelling"]}
    assert set(got) == set(scoped)
    for key, d in scoped.items():
        g = got[key]
        assert (g["pairs"], g["precision"]["k"], g["precision"]["n"], g["labels"]) == (
            d.pairs,
            d.precision.k,
            d.precision.n,
            d.labels,
        ), key
    assert any(d.labels for d in scoped.values()) and not all(d.labels for d in scoped.values())
    cancel = rows[("policy.airline.cancel.eligibility", None)]
    want = expected[("policy.airline.cancel.eligibility", None)]
    assert (cancel["true_pos"], cancel["false_pos"]) == (want.true_pos, want.false_pos)
    assert want.true_pos >= 2 and cancel["precision"]["low"] == want.precision.low
    anyj = rows[(ANY_JUDGE, None)]
    w = expected[(ANY_JUDGE, None)]
    assert (anyj["true_pos"], anyj["false_pos"], anyj["false_neg"]) == (
        w.true_pos,
        w.false_pos,
        w.false_neg,
    )
    assert anyj["recall"]["value"] == w.recall.value and w.recall.k > 0
    text = await asyncio.to_thread(
        CliRunner().invoke, app, ["judges", "--since", "3650d"], env={**env, "COLUMNS": "300"}
    )
    assert text.exit_code == 0 and "policy.airline.cancel.eligibility" in text.output
    assert ANY_JUDGE in text.output
    # --flags quotes what was wrong: the call, the reason, the clause, the evidence's events
    args = ["judges", "--since", "3650d", "--flags", "50", "--flags-of", "policy.*", "--json"]
    res = await asyncio.to_thread(CliRunner().invoke, app, args, env=env)
    assert res.exit_code == 0, res.output
    flags = json.loads(res.output)["flags"]
    policy_failures = [v for v in verdicts if v.judge.startswith("policy.") and v.label == 0]
    assert len(flags) == len(policy_failures) >= 3
    assert all(f["judge"].startswith("policy.") for f in flags)
    cancel_flag = next(f for f in flags if f["judge"] == "policy.airline.cancel.eligibility")
    assert cancel_flag["rationale"].startswith("cancel_reservation: ")
    assert (
        '(policy: "The API does not check that cancellation rules are met'
        in (cancel_flag["rationale"])
    )
    cited = cancel_flag["evidence"]["evidence"][0]
    assert cited["kind"] == "tool_result" and cited["tool"] == "get_reservation_details"
    assert cited["event_id"].startswith(cancel_flag["conversation_id"] + ":")
    text = await asyncio.to_thread(
        CliRunner().invoke, app, args[:-1], env={**env, "COLUMNS": "300"}
    )
    assert "latest failures" in text.output and cited["event_id"] in text.output
