"""``monitor alerts backtest``: what the rules would have paged over stored history.

Walks ``--from`` .. ``--to`` with the worker's drift checks and rule evaluation in a scratch
schema (:mod:`monitor.alerts.backtest`): live alert state, drift references and the outbox
are left alone and nothing is delivered. Prints per rule and segment: pages, episodes, time
firing, flaps, and the first page after each ``--change AGENT@T``. Exit codes: 0 done, 2 bad
options, an invalid rules file, or no database.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from monitor.cli import analytics_common as ac


def _parse_change(text: str) -> tuple[str, datetime]:
    agent, sep, when = text.rpartition("@")
    if not sep or not agent:
        raise typer.BadParameter(f"{text!r} is not AGENT@TIME", param_hint="--change")
    return agent, ac.when(when, "--change")


def backtest_table(rows: list[dict[str, Any]], changes: list[str]) -> Table:
    """One row per rule and segment."""
    t = ac.titled_table(
        "backtest", ("rule", "segment", "pages", "episodes", "firing (h)", "flaps", *changes)
    )
    for r in rows:
        scope = escape(",".join(f"{k}={v}" for k, v in r["scope"].items()) or "global")
        after = r["first_page_after_change_min"]
        cells = [
            "-" if c not in after else ("none" if after[c] is None else f"{after[c]:g} min")
            for c in changes
        ]
        t.add_row(
            r["rule"],
            scope,
            str(r["pages"]),
            str(r["episodes"]),
            f"{r['firing_minutes'] / 60:.1f}",
            str(r["flaps"]),
            *cells,
        )
    return t


def add_backtest_command(group: typer.Typer) -> None:
    """Register ``backtest`` on the ``alerts`` command group."""

    @group.command("backtest")
    def backtest_cmd(
        start: str = typer.Option(..., "--from", help="Start, ISO 8601 (UTC if no zone)."),
        end: str = typer.Option(..., "--to", help="End, ISO 8601."),
        rules_file: Path | None = typer.Option(
            None, "--rules", help="Rules file (default: settings, else built-in)."
        ),
        step: str = typer.Option("5m", "--step", help="Time between evaluations."),
        agent: str | None = typer.Option(None, "--agent", help="Only this agent's segments."),
        change: list[str] = typer.Option(
            [], "--change", help="AGENT@TIME a real change happened (repeatable)."
        ),
        as_json: bool = ac.JSON,
    ) -> None:
        """Replay stored history through the drift checks and rules; live state untouched."""
        from monitor.alerts.backtest import Change, DriftJob, backtest, only_agent, summarize
        from monitor.cli.alert_rules import rules_or_exit
        from monitor.config import load_settings

        rules = rules_or_exit(rules_file)
        if agent is not None:
            rules = only_agent(rules, agent)
        lo, hi = ac.when(start, "--from"), ac.when(end, "--to")
        if hi < lo:
            raise typer.BadParameter("--to is before --from")
        every = ac.duration(step, "--step")
        if every <= timedelta(0):
            raise typer.BadParameter("must be longer than 0s", param_hint="--step")
        marks = [Change(*_parse_change(c)) for c in change]
        s = load_settings()
        drift = DriftJob(
            timedelta(seconds=s.drift_interval_s),
            timedelta(seconds=s.drift_recent_s),
            timedelta(seconds=s.drift_reference_s),
            s.drift_alpha,
            s.drift_min_samples,
            s.drift_min_reference,
        )

        async def go(eng: ac.AsyncEngine) -> list[dict[str, Any]]:
            steps, identities = await backtest(eng, rules, lo, hi, every, drift)
            return [r.to_dict() for r in summarize(steps, identities, every, marks)]

        rows = ac.run_with_engine(ac.console(), go, reads=True)
        keys = [f"{c.agent}@{c.at.isoformat()}" for c in marks]
        if as_json:
            ac.print_json({"from": lo, "to": hi, "step": step, "rules": rows})
            return
        if not rows:
            typer.echo("no rule had data in the range")
            return
        ac.print_table(ac.console(), backtest_table(rows, keys))
        pages = sum(r["pages"] for r in rows)
        flaps = sum(r["flaps"] for r in rows)
        typer.echo(f"{pages} pages, {flaps} flapping notifications, {len(rows)} rule x segment")
