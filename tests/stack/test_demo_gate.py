"""The demo's gated agents through a real gate process and worker: `monitor up`'s own gate code
(monitor/stack/demo_gate.py: plan, then ``ask_and_send``: ask ``POST /v1/gate``, send) against
a worker on a real broker and Postgres, then the demo's own read (monitor/stack/summary.py)
and printout (monitor/cli/up_gate.py), checked against the truth the simulator built in.

Two truths: (1) per conversation, the simulator knows P(success) given the draft and the
decision the gate actually gave (stored in the outcome's attributes), so the failures counted
among proceeded / all / stopped conversations must lie within 4.5 standard deviations of the
sum of those probabilities (Poisson-binomial); (2) a priori (``gate_truth``), each agent's
decision shares and escalation rate are those of the built-in policy, up to the decisions the
gate made by failing open under load (counted and allowed for)."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
from rich.console import Console

from monitor.cli.up_gate import print_gate
from monitor.gate.effect import effectiveness
from monitor.sim.gated import gate_truth
from monitor.stack.demo import plan_traffic
from monitor.stack.demo_gate import ask_and_send, plan_gated
from monitor.stack.summary import gated_conversations
from monitor.store.engine import libpq_url, make_engine
from tests.servers.worker import QUIET, GateProcess, running_worker, wait_for_count

SIGMAS = 4.5


def poisson_binomial_ok(failures: int, p_success: list[float]) -> bool:
    mean = sum(1 - p for p in p_success)
    sd = math.sqrt(sum(p * (1 - p) for p in p_success))
    return abs(failures - mean) <= SIGMAS * sd + 1e-9


async def test_demo_gate_figures_match_the_truth(
    broker: Any, topic_name: str, database_url: str, tmp_path: Path
) -> None:
    async with running_worker(broker.bootstrap, database_url, topic_name, tmp_path, **QUIET):
        gate = GateProcess(broker.bootstrap, database_url, topic_name, tmp_path, **QUIET)
        await gate.start().wait_ready()  # as monitor up starts it, after the worker
        now = datetime.now(UTC)
        plan = plan_traffic(5, 60.0, 200.0, now)  # the demo's default traffic plan
        run = plan_gated(plan, 5, now)
        assert run.conversations >= 300
        totals: list[int] = []
        try:
            sent, asked = await ask_and_send(
                run,
                gate.url,
                None,
                broker.bootstrap,
                topic_name,
                idempotent=False,
                seconds=3.0,
                on_total=totals.append,
            )
            assert run.unanswered == 0 and len(run.decisions) == run.conversations
            assert totals == [len(sent)] and asked > 0
            assert all(e.conversation_id.startswith(plan.prefix) for e in sent)
            assert max(e.ts for e in sent) <= now  # simulated time does not run ahead
            want = len(sent) + run.conversations  # plus one decision event per conversation
            sql = f"SELECT count(*) FROM events WHERE conversation_id LIKE '{plan.prefix}%'"
            assert await wait_for_count(database_url, want, sql, timeout=120) == want
        finally:
            gate.stop()  # after its decision events were stored

    engine = make_engine(database_url)
    try:
        rows, degraded = await gated_conversations(engine, plan.scope)
    finally:
        await engine.dispose()
    assert len(rows) == run.conversations
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        truth_rows = await conn.fetch(
            "SELECT agent_id, (body->'outcome'->>'success')::bool AS success,"
            " (body->'attributes'->>'p_success')::float8 AS p,"
            " body->'attributes'->>'gate_decision' AS decision"
            " FROM events WHERE type = 'outcome' AND conversation_id LIKE $1",
            plan.prefix + "%",
        )
    finally:
        await conn.close()
    # the agents acted on the decision the gate stored
    stored = sorted((r.agent_id, r.decision) for r in rows)
    assert stored == sorted((r["agent_id"], r["decision"]) for r in truth_rows)

    specs = {s.agent_id: s for s in run.traffic.agents}
    effects = {e.agent_id: e for e in effectiveness(rows)}
    assert set(effects) == set(specs)
    for agent, e in effects.items():
        mine = [r for r in truth_rows if r["agent_id"] == agent]
        proceeded = [r for r in mine if r["decision"] == "proceed"]
        # (1) conditional truth: failures among all and among proceeded
        assert e.failure_rate_all.k == sum(not r["success"] for r in mine)
        assert poisson_binomial_ok(e.failure_rate_all.k, [r["p"] for r in mine]), agent
        assert poisson_binomial_ok(e.failure_rate_proceeded.k, [r["p"] for r in proceeded])
        stopped = [r for r in mine if r["decision"] != "proceed"]
        assert e.failures_prevented.k == sum(not r["success"] for r in stopped)
        assert poisson_binomial_ok(e.failures_prevented.k, [r["p"] for r in stopped]), agent
        # (2) a priori truth of the built-in policy, allowing for fail-open decisions
        t = gate_truth(specs[agent])
        n = e.conversations
        for kind in ("proceed", "revise", "escalate"):
            sd = math.sqrt(t.decisions[kind] * (1 - t.decisions[kind]) / n)
            slack = degraded / n
            assert abs(e.decisions[kind] / n - t.decisions[kind]) <= SIGMAS * sd + slack, (
                agent,
                kind,
            )
        if specs[agent].obeys:  # obeying the gate lowers the failure rate below ungated
            assert (e.failure_rate_all.high or 1.0) < t.ungated_failure_rate, agent
    assert degraded <= run.conversations // 10  # fail-open is the exception

    console = Console(record=True, width=200)
    await asyncio.to_thread(print_gate, console, database_url, plan, run)  # runs its own loop
    text = console.export_text()
    assert "Runtime trust gate" in text
    for agent, e in effects.items():
        line = next(x for x in text.splitlines() if f" {agent} " in x)
        d = e.decisions
        assert f"{d['proceed']}/{d['revise']}/{d['escalate']}" in line
        assert f"(truth {100 * gate_truth(specs[agent]).escalation_rate:.0f}%)" in line
