"""``monitor alerts test``: send a sample notification through each configured sink.

Exit codes: 0 every sink accepted it, 1 at least one did not, 2 no sink is configured (or the
sink settings are inconsistent). The table shows each sink's outcome, HTTP status and answer
(Slack: the channel and message ``ts``; errors never show tokens, secrets or webhook URLs).
"""

from __future__ import annotations

import asyncio

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from monitor.alerts import sink_check as notify_check
from monitor.config import load_settings
from monitor.core.errors import ConfigError

NO_SINK = (
    "no alert sink configured: set MONITOR_SLACK_BOT_TOKEN and MONITOR_SLACK_CHANNEL, "
    "MONITOR_SLACK_WEBHOOK_URL, MONITOR_WEBHOOK_URL (and MONITOR_WEBHOOK_SECRET) or "
    "MONITOR_ALERTMANAGER_URL"
)


def results_table(results: list[notify_check.SinkTestResult]) -> Table:
    """One row per sink: outcome, HTTP status, what it answered."""
    table = Table(title="alert sinks", title_justify="left")
    for col in ("sink", "result", "status", "answer"):
        table.add_column(col)
    for r in results:
        outcome = "[green]delivered[/]" if r.ok else f"[red bold]{r.outcome}[/]"
        status = "-" if r.status is None else str(r.status)
        table.add_row(r.sink, outcome, status, escape(r.detail))
    return table


def add_test_command(group: typer.Typer) -> None:
    """Register ``test`` on the ``alerts`` command group."""

    @group.command("test")
    def test() -> None:
        """Send a sample notification through each configured sink and show what each
        answered (exit 1 if any failed, 2 if none is configured)."""
        console = Console()
        try:
            results = asyncio.run(notify_check.test_sinks(load_settings()))
        except ConfigError as exc:
            console.print(f"[red]{escape(str(exc))}[/]")
            raise typer.Exit(2) from None
        if not results:
            console.print(NO_SINK)
            raise typer.Exit(2)
        console.print(results_table(results))
        raise typer.Exit(0 if all(r.ok for r in results) else 1)
