"""``monitor``: the command line. Commands live in ``monitor/commands/*`` and register here."""

from __future__ import annotations

import typer

from monitor.commands import alerts as alerts_cmd
from monitor.commands import calibration as calibration_cmd
from monitor.commands import dashboards as dashboards_cmd
from monitor.commands import drift as drift_cmd
from monitor.commands import escalation as escalation_cmd
from monitor.commands import judges as judges_cmd
from monitor.commands import replay as replay_cmd
from monitor.commands import report as report_cmd
from monitor.commands import schema as schema_cmd
from monitor.commands import simulate as simulate_cmd
from monitor.commands import up as up_cmd
from monitor.commands import worker as worker_cmd

app = typer.Typer(
    name="monitor",
    help="Agent reliability monitor: ingest agent events, score them, watch calibration and "
    "escalation, and page on-call when they go wrong.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def main() -> None:
    """Agent reliability monitor. Configure with MONITOR_* environment variables (see README)."""


for _module in (
    up_cmd,
    schema_cmd,
    worker_cmd,
    replay_cmd,
    simulate_cmd,
    calibration_cmd,
    escalation_cmd,
    drift_cmd,
    judges_cmd,
    alerts_cmd,
    dashboards_cmd,
    report_cmd,
):
    _module.register(app)


if __name__ == "__main__":  # pragma: no cover
    app()
