"""``monitor report``: write the HTML report (and its PNGs) for a time range and scope.

The numbers are those of ``monitor calibration|escalation|thresholds --json`` for the same
options (their defaults: missed-escalation threshold 0.5, target residual failure 0.1, thresholds
0.0, 0.1, ..., 1.0). Exit codes: 0 written, 2 bad options or no database.
"""

from __future__ import annotations

from pathlib import Path

import typer

from monitor.cli import analytics_common as ac
from monitor.report import write as fr


def register(app: typer.Typer) -> None:
    @app.command("report")
    @ac.scoped("agent", "domain", "tier", "version")
    def report(
        scope: ac.Scope,
        out: Path = typer.Option(
            Path("report"),
            "--out",
            "-o",
            help="Output directory (created): report.html and the PNG images.",
        ),
    ) -> None:
        """A self-contained HTML report (PNG charts too): a health level per agent first (healthy,
        watch or act, with the one reason), then the firing alerts, the charts per agent
        (reliability diagram, ECE over time, escalation by confidence, threshold curve) and the
        full tables last, folded."""
        console = ac.console()
        q = scope.query()
        path = ac.run_with_engine(
            console, lambda eng: fr.build_report(eng, q.segment, q.start, q.end, out), reads=True
        )
        console.print(f"report written to {path}", soft_wrap=True)
