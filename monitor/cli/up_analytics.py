"""The analytics ``monitor up`` prints at the end of its run: calibration, escalation and drift
of the simulated agents, so a newcomer sees at once which agent is overconfident, which one
drifts and which one escalates backwards.

Scope: agents ``sim-*`` over the run's simulated span. Rows of earlier runs whose span overlaps
(a rerun within the same ~hour) are included: the analytics are sums per time window and agent,
not per run.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console

from monitor.analytics import reports as fa
from monitor.analytics.repo import Segment
from monitor.cli.analytics_common import print_table
from monitor.cli.calibration import calibration_table
from monitor.cli.drift import drift_table
from monitor.cli.escalation import escalation_table
from monitor.config import load_settings
from monitor.report.write import write_demo_report
from monitor.stack.demo import TrafficPlan
from monitor.store.engine import make_engine

SIMULATED = Segment(agent="sim-*")
MISSED_THRESHOLD = 0.5


def print_analytics(
    console: Console, database_url: str, plan: TrafficPlan, state_dir: Path | None = None
) -> None:
    """Print the three tables (and a one-line reading of each); never raises for empty
    data. The HTML report comes after the alerts (:func:`print_report`)."""
    asyncio.run(_print(console, database_url, plan))


def print_report(
    console: Console, database_url: str, plan: TrafficPlan, state_dir: Path | None = None
) -> Path:
    """Write the HTML report of the run (``<state_dir>/report/report.html``), after its alerts
    were replayed (so they show as firing in it), and print its path and how to read it."""
    out_dir = (state_dir or load_settings().state_dir) / "report"
    end = datetime.now(UTC) + timedelta(minutes=1)
    path = write_demo_report(database_url, plan.simulator.start, end, out_dir)
    console.print(
        f"report written to {path} (open it in a browser: its first screen says "
        "which agent needs action and why)",
        soft_wrap=True,
    )
    return path


async def _print(console: Console, database_url: str, plan: TrafficPlan) -> None:
    if not console.is_terminal:  # a log file or a pipe: wide tables rather than cut names
        console = Console(file=console.file, width=160)
    start = plan.simulator.start
    end = datetime.now(UTC) + timedelta(minutes=1)
    engine = make_engine(database_url)
    try:
        cal = await fa.calibration(engine, SIMULATED, start, end, n_boot=300)
        esc = await fa.escalation(engine, SIMULATED, start, end, threshold=MISSED_THRESHOLD)
        # the drifting agent's overconfident stretch against the same length before it
        recent = max(timedelta(minutes=1), plan.recovery_point - plan.change_point)
        windows = fa.drift_windows(plan.recovery_point, recent)
        drift = await fa.run_drift(engine, SIMULATED, windows)
    finally:
        await engine.dispose()
    console.print()
    console.print("[bold]What the monitor found[/] (simulated agents, this run's time span)")
    if cal:
        print_table(console, calibration_table(cal, "calibration of stated confidence"))
        worst = max((a for a in cal if a != fa.ALL), key=lambda a: cal[a].ece)
        console.print(
            f"  [dim]->[/] highest ECE: [bold]{worst}[/] (gap "
            f"{cal[worst].overconfidence_gap:+.3f}: says more confident than it is)"
            if cal[worst].overconfidence_gap > 0
            else "",
            soft_wrap=True,
        )
    if esc:
        print_table(console, escalation_table(esc, MISSED_THRESHOLD))
        inverted = [a for a, s in esc.items() if s.inversion.inverted]
        console.print(
            f"  [dim]->[/] escalation inverted (rises with confidence): "
            f"[bold]{', '.join(inverted) or 'none'}[/]",
            soft_wrap=True,
        )
    if drift:
        print_table(
            console,
            drift_table({k: (windows.baseline, c) for k, c in drift.items()}, windows.recent),
        )
        fired = [k[0] for k, c in drift.items() if c.fired]
        console.print(
            f"  [dim]->[/] drift between the change point "
            f"{plan.change_point:%H:%M} and {plan.recovery_point:%H:%M} UTC: "
            f"[bold]{', '.join(fired) or 'none'}[/]",
            soft_wrap=True,
        )
    if not (cal or esc):
        console.print("  no labelled conversations yet")
