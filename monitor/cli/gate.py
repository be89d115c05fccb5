"""``monitor gate``: what the runtime trust gate prevents and what it costs (docs/gate.md).

Per agent x domain: decisions by kind, failure rate among proceeded conversations against all
gated ones, the share of failures prevented (Wilson 95 %), the escalation rate (the human cost),
revise outcomes, and beside recorded decisions the failure rate of the same agent's ungated
conversations (no decision event) as a measured baseline. Recorded decisions come from ``gate``
events; with ``--replay`` (default on) conversations without one get the decision their
recorded minimum confidence gets from the policy's threshold (through the stored map), so
the command works on replayed data.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.calibration import Proportion
from monitor.cli import analytics_common as ac
from monitor.gate.effect import Effect, GatedConversation, UngatedCounts, effectiveness
from monitor.gate.effect_repo import gated_conversations, ungated_counts
from monitor.gate.state import load_gate_policy


def _rate(r: Proportion) -> str:
    if r.value is None or r.low is None or r.high is None:
        return "-"
    return f"{r.value:.3f} [{r.low:.3f}, {r.high:.3f}] ({r.k}/{r.n})"


def effect_table(effects: list[Effect]) -> Table:
    t = ac.titled_table(
        "gate effectiveness",
        (
            "agent",
            "domain",
            "source",
            "convs",
            "proceed/revise/escalate",
            "failure rate all",
            "failure rate proceeded",
            "failures prevented",
            "escalation rate",
            "failure rate ungated",
        ),
        text=("agent", "domain", "source"),
    )
    for e in effects:
        d = e.decisions
        t.add_row(
            e.agent_id,
            e.domain or "-",
            e.source,
            str(e.conversations),
            f"{d['proceed']}/{d['revise']}/{d['escalate']}",
            _rate(e.failure_rate_all),
            _rate(e.failure_rate_proceeded),
            _rate(e.failures_prevented),
            _rate(e.escalation_rate),
            "-" if e.failure_rate_ungated is None else _rate(e.failure_rate_ungated),
        )
    return t


def register(app: typer.Typer) -> None:
    group = typer.Typer(add_completion=False)
    app.add_typer(group, name="gate")

    @group.callback(invoke_without_command=True)
    @ac.scoped(before="as_json")
    def gate(
        ctx: typer.Context,
        agent: str | None = typer.Option(None, "--agent", "-a", help="Agent id (exact)."),
        policy_file: Path | None = typer.Option(
            None,
            "--policy",
            help="Gate policy for the replayed decisions (default: "
            "MONITOR_GATE_POLICY_FILE, else the built-in policy).",
        ),
        replay: bool = typer.Option(
            True,
            "--replay/--no-replay",
            help="Replay recorded confidences against the "
            "threshold for conversations the gate never saw.",
        ),
        as_json: bool = ac.JSON,
        *,
        scope: ac.Scope,
    ) -> None:
        """Gate effectiveness per agent x domain: decisions by kind, failures among proceeded
        vs all, failures prevented (Wilson 95 %), escalation rate. Recorded decisions by their
        event time; replayed ones by the conversation's start. `monitor gate serve` runs the
        gate as a process of its own."""
        if ctx.invoked_subcommand is not None:
            return
        from monitor.config import load_settings

        console = ac.console()
        q = scope.query()
        policy = load_gate_policy(policy_file or load_settings().gate_policy_file)

        async def load(eng: AsyncEngine) -> tuple[list[GatedConversation], list[UngatedCounts]]:
            rows = await gated_conversations(eng, policy, q.start, q.end, agent, replay)
            return rows, await ungated_counts(eng, q.start, q.end, agent)

        rows, ungated = ac.run_with_engine(console, load, reads=True)
        effects = effectiveness(rows, ungated)
        if as_json:
            ac.print_json(
                {
                    "from": q.start,
                    "to": q.end,
                    "policy_version": policy.version,
                    "policy_source": policy.source,
                    "effects": effects,
                }
            )
            return
        if not effects:
            console.print(f"no gated or replayable conversations between {q.start} and {q.end}")
            return
        ac.print_table(console, effect_table(effects))
        for e in effects:
            for note in e.notes:
                console.print(f"{e.agent_id}/{e.domain or '-'} ({e.source}): {note}")

    @group.command("serve")
    def serve(
        loglevel: str = typer.Option("info", help="Log level: debug, info, warning, error."),
    ) -> None:
        """Run the gate as a process of its own: POST /v1/gate, /health and /metrics on
        MONITOR_GATE_HOST:MONITOR_GATE_PORT (SO_REUSEPORT: start several on one port to scale).
        Needs MONITOR_KAFKA_BOOTSTRAP and DATABASE_URL (or a running `monitor up`); keeps
        answering while either is down. Stops cleanly on Ctrl-C / SIGTERM."""
        from monitor.cli.worker import run_process
        from monitor.gate.server import run_gate

        run_process(run_gate, loglevel)
