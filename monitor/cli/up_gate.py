"""What ``monitor up`` prints about the runtime trust gate: per simulated gated agent, the
gate's decisions, the failures they prevented and the human cost, measured from what was
stored (the figures of ``monitor gate``, :mod:`monitor.gate.effect`) beside the truth the
simulator built in (:func:`monitor.sim.gated.gate_truth`)."""

from __future__ import annotations

import asyncio

from rich.console import Console
from rich.table import Table

from monitor.analytics.calibration import Proportion
from monitor.cli.analytics_common import print_table
from monitor.gate.effect import Effect, effectiveness
from monitor.sim.gated import Truth, gate_truth
from monitor.stack.demo import TrafficPlan
from monitor.stack.demo_gate import GatedRun
from monitor.stack.summary import gated_conversations
from monitor.store.engine import make_engine


def _rate(r: Proportion, truth: float | None = None) -> str:
    if r.value is None or r.low is None or r.high is None:
        return "-"
    shown = f"{100 * r.value:.0f}% [{100 * r.low:.0f}-{100 * r.high:.0f}]"
    return shown if truth is None else f"{shown} (truth {100 * truth:.0f}%)"


async def _load(database_url: str, plan: TrafficPlan) -> tuple[list[Effect], int]:
    engine = make_engine(database_url, pool_size=1)
    try:
        rows, degraded = await gated_conversations(engine, plan.scope)
    finally:
        await engine.dispose()
    return effectiveness(rows), degraded


def gate_table(effects: list[Effect], truths: dict[str, Truth], obeys: dict[str, bool]) -> Table:
    t = Table(title="Runtime trust gate: measured [95% interval] (truth)", title_justify="left")
    for name in (
        "agent",
        "obeys",
        "proceed/revise/escalate",
        "escalation rate (human cost)",
        "failures prevented",
        "failure rate",
        "failure rate without the gate",
    ):
        t.add_column(name, justify="left" if name in ("agent", "obeys") else "right")
    for e in effects:
        truth = truths.get(e.agent_id)
        d = e.decisions
        t.add_row(
            e.agent_id,
            {True: "yes", False: "no"}.get(obeys.get(e.agent_id, False), "?"),
            f"{d['proceed']}/{d['revise']}/{d['escalate']}",
            _rate(e.escalation_rate, None if truth is None else truth.escalation_rate),
            _rate(e.failures_prevented, None if truth is None else truth.failures_prevented),
            _rate(e.failure_rate_all, None if truth is None else truth.failure_rate_all),
            "-" if truth is None else f"{100 * truth.ungated_failure_rate:.0f}% (truth)",
        )
    return t


def print_gate(console: Console, database_url: str, plan: TrafficPlan, gated: GatedRun) -> None:
    """The gate table of this run (see the module docstring) and how to read it."""
    effects, degraded = asyncio.run(_load(database_url, plan))
    if not console.is_terminal and console.width < 160:  # a log or a pipe: as up_analytics
        console = Console(file=console.file, width=160)
    specs = {a.agent_id: a for a in gated.traffic.agents}
    console.print()
    if not effects:
        console.print("[yellow]no gate decision was stored for this run[/]")
        return
    print_table(
        console,
        gate_table(
            effects,
            {a: gate_truth(s) for a, s in specs.items()},
            {a: s.obeys for a, s in specs.items()},
        ),
    )
    notes = []
    if gated.unanswered:
        notes.append(f"{gated.unanswered} request(s) got no answer (the agents proceeded)")
    if degraded:
        notes.append(
            f"{degraded} decision(s) made by the fail-open choice (checks ran "
            "past their deadline), not by the checks"
        )
    console.print(
        "Each agent drafts a reply with a stated confidence (calibrated: P(success) = "
        "confidence) and sometimes claims a cancellation whose tool call failed (a "
        "fabrication: P(success) = 0.3 x confidence). The gate escalates below confidence "
        "0.5 and asks for a revision when its checks find the fabrication. Agents that obey "
        "revise (the fabrication removed) or hand over to a human (P(success) = 0.9); the "
        "one that ignores the gate sends its draft anyway, so its failures prevented are "
        "those the gate flagged. Failures prevented: failures in conversations the gate "
        "stopped / all failures; failure rate: over all its conversations with an outcome."
        + (" " + "; ".join(notes) + "." if notes else ""),
        soft_wrap=True,
    )
