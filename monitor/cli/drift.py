"""``monitor drift``: compare a recent window with a baseline, per segment, and store the check.

Tests (DESIGN.md section 4, issue 4): PSI and a binned Kolmogorov-Smirnov test on the
confidence distribution, a two-proportion z-test on accuracy, and a parametric-bootstrap test
of the ECE increase. A check fires when a test is significant at ``--alpha`` (PSI: above 0.25)
and both windows reach ``--min-samples`` items.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import typer
from rich.table import Table
from sqlalchemy import text

from monitor.analytics import reports as fa
from monitor.analytics.drift import DriftCheck
from monitor.analytics.repo import Segment
from monitor.analytics.write import SegmentKey
from monitor.cli import analytics_common as ac


def drift_table(checks: dict[SegmentKey, DriftCheck], windows: fa.DriftWindows) -> Table:
    """One row per segment with every statistic and p-value behind the verdict."""
    b, r = windows.baseline, windows.recent
    t = Table(
        title=f"drift: recent {r[0]:%m-%d %H:%M}-{r[1]:%H:%M} vs baseline "
        f"{b[0]:%m-%d %H:%M}-{b[1]:%H:%M} UTC",
        title_justify="left",
    )
    for col in ("agent", "version", "domain", "tier", "n base/recent", "PSI", "KS (p)",
                "accuracy base->recent (p)", "ECE base->recent (p)", "fired"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("agent", "domain") else "right")
    for (agent, version, domain, tier), c in checks.items():
        t.add_row(
            agent, version or "-", domain or "-", str(tier or "-"),
            f"{c.n_baseline}/{c.n_recent}",
            ac.fmt(c.psi),
            f"{ac.fmt(c.ks_statistic)} ({ac.fmt(c.ks_pvalue, 4)})",
            f"{ac.fmt(c.accuracy_baseline)}->{ac.fmt(c.accuracy_recent)} "
            f"({ac.fmt(c.accuracy_pvalue, 4)})",
            f"{ac.fmt(c.ece_baseline)}->{ac.fmt(c.ece_recent)} ({ac.fmt(c.ece_pvalue, 4)})",
            f"[red bold]{', '.join(c.fired_tests)}[/]" if c.fired else "no",
        )  # fmt: skip
    return t


async def _newest_item(engine: ac.AsyncEngine, segment: Segment) -> datetime | None:
    cond, params = segment.where()
    async with engine.connect() as conn:
        sql = f"SELECT max(ts) FROM items WHERE label IS NOT NULL AND {cond}"
        found = await conn.execute(text(sql), params)
        newest: datetime | None = found.scalar()
    return newest


def empty_drift_message(windows: fa.DriftWindows, newest: datetime | None) -> str:
    """Why ``drift`` found nothing, and how to look where the data is."""
    rec, base = windows.recent, windows.baseline
    text_ = (f"no labelled items in the recent window ({rec[0]:%Y-%m-%d %H:%M} to "
             f"{rec[1]:%H:%M} UTC) or the baseline ({base[0]:%Y-%m-%d %H:%M} to "
             f"{base[1]:%H:%M} UTC).")  # fmt: skip
    if newest is None:
        return text_ + " The store has no labelled items in this scope yet."
    at = newest.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    return (text_ + f" The newest labelled item is from {newest.astimezone(UTC):%Y-%m-%d %H:%M}"
            f" UTC: look back with --at {at:%Y-%m-%dT%H:%M}Z (the end of the recent window), "
            "or widen --recent.")  # fmt: skip


def register(app: typer.Typer) -> None:
    @app.command("drift")
    def drift(
        agent: str | None = ac.AGENT,
        domain: str | None = ac.DOMAIN,
        tier: int | None = ac.TIER,
        version: str | None = ac.VERSION,
        recent: str = typer.Option("1h", "--recent", help="Length of the recent window."),
        at: str | None = typer.Option(None, "--at", help="End of the recent window, ISO 8601 "
                                      "(default: now)."),
        baseline_from: str | None = typer.Option(None, "--baseline-from", help="Pinned "
                                                 "baseline start (default: the period just "
                                                 "before the recent window)."),
        baseline_to: str | None = typer.Option(None, "--baseline-to",
                                               help="Pinned baseline end."),
        alpha: float = typer.Option(0.01, "--alpha", min=1e-6, max=0.5,
                                    help="Significance level of each test."),
        min_samples: int = typer.Option(100, "--min-samples", min=1,
                                        help="Fewest items per window for a check to fire."),
        store: bool = typer.Option(True, "--store/--no-store", help="Store the checks."),
        as_json: bool = ac.JSON,
    ) -> None:
        """Drift per segment: recent window against a baseline, every statistic and p-value,
        stored in drift_checks (the dashboards and alerts read them)."""
        console = ac.console()
        now = ac.when(at, "--at") if at else datetime.now(UTC)
        length = ac.duration(recent, "--recent")
        pinned = None
        if baseline_from or baseline_to:
            if not (baseline_from and baseline_to):
                raise typer.BadParameter("give both --baseline-from and --baseline-to")
            pinned = (ac.when(baseline_from, "--baseline-from"),
                      ac.when(baseline_to, "--baseline-to"))
        try:
            windows = fa.drift_windows(now, length, pinned)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        segment = ac.query(agent, domain, tier, version, "1m", None, None).segment
        checks = ac.run_with_engine(console, lambda eng: fa.run_drift(
            eng, segment, windows, alpha=alpha, min_samples=min_samples, store=store))
        if as_json:
            ac.print_json({
                "baseline": list(windows.baseline), "recent": list(windows.recent),
                "checks": [{"agent_id": k[0], "agent_version": k[1], "domain": k[2],
                            "tier": k[3], **c.to_dict()} for k, c in checks.items()],
            })  # fmt: skip
            return
        if not checks:
            newest = ac.run_with_engine(console, lambda eng: _newest_item(eng, segment))
            console.print(empty_drift_message(windows, newest), soft_wrap=True)
            return
        ac.print_table(console, drift_table(checks, windows))
