"""``monitor drift``: compare a recent window with a baseline, per segment, and store the check.

The baseline is each segment's **pinned reference**, the same the worker's periodic checks and
the drift alerts compare with (:mod:`monitor.analytics.drift_policy`), read and left as it is
(an ad-hoc check never moves it); a segment without a stored reference yet compares with the
``--reference`` period before the recent window, as the worker's first check does. With
``--baseline-from/--baseline-to`` every segment compares with that one pinned window instead.

Tests (docs/design.md, "Metric definitions"): PSI and a binned Kolmogorov-Smirnov test on the
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
from monitor.analytics.periodic import Window, drift_against_references
from monitor.analytics.repo import Segment
from monitor.analytics.write import SegmentKey
from monitor.cli import analytics_common as ac


def drift_table(checks: dict[SegmentKey, tuple[Window, DriftCheck]], recent: Window) -> Table:
    """One row per segment with its baseline and every statistic and p-value behind the
    verdict."""
    r = recent
    t = Table(
        title=f"drift: recent {r[0]:%m-%d %H:%M}-{r[1]:%H:%M} UTC vs each segment's baseline",
        title_justify="left",
    )
    for col in (
        "agent",
        "version",
        "domain",
        "tier",
        "baseline UTC",
        "n base/recent",
        "PSI",
        "KS (p)",
        "accuracy base->recent (p)",
        "ECE base->recent (p)",
        "fired",
    ):
        t.add_column(col, justify="left" if col in ("agent", "domain") else "right")
    for (agent, version, domain, tier), (b, c) in checks.items():
        t.add_row(
            agent,
            version or "-",
            domain or "-",
            str(tier or "-"),
            f"{b[0]:%m-%d %H:%M}-{b[1]:%H:%M}"
            if b[0].date() == b[1].date()
            else f"{b[0]:%m-%d %H:%M}-{b[1]:%m-%d %H:%M}",
            f"{c.n_baseline}/{c.n_recent}",
            ac.fmt(c.psi),
            f"{ac.fmt(c.ks_statistic)} ({ac.fmt(c.ks_pvalue, 4)})",
            f"{ac.fmt(c.accuracy_baseline)}->{ac.fmt(c.accuracy_recent)} "
            f"({ac.fmt(c.accuracy_pvalue, 4)})",
            f"{ac.fmt(c.ece_baseline)}->{ac.fmt(c.ece_recent)} ({ac.fmt(c.ece_pvalue, 4)})",
            f"[red bold]{', '.join(c.fired_tests)}[/]" if c.fired else "no",
        )
    return t


async def _newest_item(engine: ac.AsyncEngine, segment: Segment) -> datetime | None:
    cond, params = segment.where()
    async with engine.connect() as conn:
        sql = f"SELECT max(ts) FROM items WHERE label IS NOT NULL AND {cond}"
        found = await conn.execute(text(sql), params)
        newest: datetime | None = found.scalar()
    return newest


def empty_drift_message(rec: Window, newest: datetime | None) -> str:
    """Why ``drift`` found nothing, and how to look where the data is."""
    text_ = (
        f"no labelled items in the recent window ({rec[0]:%Y-%m-%d %H:%M} to {rec[1]:%H:%M} UTC)."
    )
    if newest is None:
        return text_ + " The store has no labelled items in this scope yet."
    at = newest.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    return (
        text_ + f" The newest labelled item is from {newest.astimezone(UTC):%Y-%m-%d %H:%M}"
        f" UTC: look back with --at {at:%Y-%m-%dT%H:%M}Z (the end of the recent window), "
        "or widen --recent."
    )


def register(app: typer.Typer) -> None:
    @app.command("drift")
    def drift(
        agent: str | None = ac.AGENT,
        domain: str | None = ac.DOMAIN,
        tier: int | None = ac.TIER,
        version: str | None = ac.VERSION,
        recent: str = typer.Option("1h", "--recent", help="Length of the recent window."),
        at: str | None = typer.Option(
            None, "--at", help="End of the recent window, ISO 8601 (default: now)."
        ),
        reference: str = typer.Option(
            "24h",
            "--reference",
            help="Length of a new segment's "
            "reference (the worker's MONITOR_DRIFT_REFERENCE_S); a "
            "segment with a stored reference uses that one.",
        ),
        baseline_from: str | None = typer.Option(
            None,
            "--baseline-from",
            help="One pinned baseline for every segment instead of their references.",
        ),
        baseline_to: str | None = typer.Option(None, "--baseline-to", help="Pinned baseline end."),
        alpha: float = typer.Option(
            0.001,
            "--alpha",
            min=1e-6,
            max=0.5,
            help="Family-wise level of each check (Holm across its "
            "tests); the worker's default MONITOR_DRIFT_ALPHA.",
        ),
        min_samples: int = typer.Option(
            100, "--min-samples", min=1, help="Fewest items per window for a check to fire."
        ),
        store: bool = typer.Option(True, "--store/--no-store", help="Store the checks."),
        as_json: bool = ac.JSON,
    ) -> None:
        """Drift per segment: recent window against the segment's pinned reference (the one
        the worker's checks and the drift alerts use; never moved by this command) or one
        --baseline-from/--baseline-to window, every statistic and p-value, stored in
        drift_checks (the dashboards and alerts read them)."""
        console = ac.console()
        now = ac.when(at, "--at") if at else datetime.now(UTC)
        length = ac.duration(recent, "--recent")
        pinned = None
        if baseline_from or baseline_to:
            if not (baseline_from and baseline_to):
                raise typer.BadParameter("give both --baseline-from and --baseline-to")
            pinned = (
                ac.when(baseline_from, "--baseline-from"),
                ac.when(baseline_to, "--baseline-to"),
            )
        ref_length = ac.duration(reference, "--reference")
        try:
            windows = fa.drift_windows(now, length, pinned)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        segment = ac.query(agent, domain, tier, version, "1m", None, None).segment

        async def run(eng: ac.AsyncEngine) -> dict[SegmentKey, tuple[Window, DriftCheck]]:
            if pinned is not None:
                found = await fa.run_drift(
                    eng, segment, windows, alpha=alpha, min_samples=min_samples, store=store
                )
                return {k: (windows.baseline, c) for k, c in found.items()}
            return await drift_against_references(
                eng,
                now,
                length,
                alpha=alpha,
                min_samples=min_samples,
                reference=ref_length,
                segment=segment,
                track=False,
                store=store,
            )

        checks = ac.run_with_engine(console, run, reads=not store)
        if as_json:
            ac.print_json(
                {
                    "baseline": list(windows.baseline) if pinned is not None else "reference",
                    "recent": list(windows.recent),
                    "checks": [
                        {
                            "agent_id": k[0],
                            "agent_version": k[1],
                            "domain": k[2],
                            "tier": k[3],
                            "baseline_from": b[0],
                            "baseline_to": b[1],
                            **c.to_dict(),
                        }
                        for k, (b, c) in checks.items()
                    ],
                }
            )
            return
        if not checks:
            newest = ac.run_with_engine(console, lambda eng: _newest_item(eng, segment), reads=True)
            console.print(empty_drift_message(windows.recent, newest), soft_wrap=True)
            return
        ac.print_table(console, drift_table(checks, windows.recent))
