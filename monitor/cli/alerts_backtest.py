"""``monitor alerts backtest``: what the rules would have paged over stored history.

Walks ``--from`` .. ``--to`` with the worker's drift checks and rule evaluation in a scratch
schema (:mod:`monitor.alerts.backtest`): live alert state, drift references and the outbox
are left alone and nothing is delivered. Prints per rule and segment: alerts fired, pages
among them, episodes, time firing, flaps, and the first firing after each ``--change
AGENT@T``; then the incidents (an agent's alerts that paged once) with their alerts, pages
and updates. Exit codes: 0 done, 2 bad options, an invalid rules file, or no database.
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
        "backtest",
        ("rule", "segment", "fired", "pages", "episodes", "firing (h)", "flaps", *changes),
    )
    for r in rows:
        scope = escape(",".join(f"{k}={v}" for k, v in r["scope"].items()) or "global")
        after = r["first_fired_after_change_min"]
        cells = [
            "-" if c not in after else ("none" if after[c] is None else f"{after[c]:g} min")
            for c in changes
        ]
        t.add_row(
            r["rule"],
            scope,
            str(r["fired"]),
            str(r["pages"]),
            str(r["episodes"]),
            f"{r['firing_minutes'] / 60:.1f}",
            str(r["flaps"]),
            *cells,
        )
    return t


def incidents_table(incidents: list[dict[str, Any]]) -> Table:
    """One row per incident: its key, when it opened and resolved, its alerts, pages."""
    t = ac.titled_table(
        "incidents",
        ("incident", "key", "opened (UTC)", "resolved (UTC)", "severity", "alerts", "pages"),
    )
    for i in incidents:
        t.add_row(
            i["id"],
            escape(i["key"]),
            i["opened_at"][:16].replace("T", " "),
            "-" if i["resolved_at"] is None else i["resolved_at"][:16].replace("T", " "),
            i["severity"],
            escape(", ".join(i["alerts"])),
            f"{i['pages']} (+{i['updates']} updates)",
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
        from monitor.alerts.backtest import (
            Change,
            DriftJob,
            backtest,
            only_agent,
            summarize,
            summarize_incidents,
        )
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

        async def go(eng: ac.AsyncEngine) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            steps, identities, found = await backtest(eng, rules, lo, hi, every, drift)
            rows = [r.to_dict() for r in summarize(steps, identities, every, marks)]
            return rows, [i.to_dict() for i in summarize_incidents(found)]

        rows, incidents = ac.run_with_engine(ac.console(), go, reads=True)
        keys = [f"{c.agent}@{c.at.isoformat()}" for c in marks]
        if as_json:
            out = {"from": lo, "to": hi, "step": step, "rules": rows, "incidents": incidents}
            ac.print_json(out)
            return
        if not rows:
            typer.echo("no rule had data in the range")
            return
        ac.print_table(ac.console(), backtest_table(rows, keys))
        if incidents:
            ac.print_table(ac.console(), incidents_table(incidents))
        pages = sum(r["pages"] for r in rows)
        fired = sum(r["fired"] for r in rows)
        flaps = sum(r["flaps"] for r in rows)
        typer.echo(
            f"{pages} pages in {len(incidents)} incidents ({fired} alerts fired), "
            f"{flaps} flapping notifications, {len(rows)} rule x segment"
        )
