"""``monitor calibration``: calibration reports, recalibration maps (fit / show).

``monitor calibration`` prints, per agent and for all agents together, ECE, MCE, Brier,
accuracy, mean confidence and the overconfidence gap with their intervals, then the reliability
diagram of each agent. Numbers below the minimum sample size are printed but marked as not
meaningful. When some labels come from judges rather than outcomes, it says which share, each
judge's measured precision and recall, and the success rate corrected for the judge's error
rates (:mod:`monitor.judges.judge_noise`).
"""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from monitor.analytics import reports as fa
from monitor.analytics.calibration import DEFAULT_MIN_SAMPLES, CalibrationReport
from monitor.analytics.recalibration import RecalibrationResult
from monitor.analytics.write import current_maps
from monitor.cli import analytics_common as ac
from monitor.judges.judge_noise import JudgeLabels, judge_labels


def calibration_table(reports: dict[str, CalibrationReport], title: str) -> Table:
    """One row per agent (and ``*`` = all): the headline calibration numbers."""
    t = ac.titled_table(
        title,
        (
            "agent",
            "items",
            "n_eff",
            "ECE [95% CI]",
            "MCE",
            "Brier",
            "accuracy",
            "mean conf",
            "gap (conf-acc)",
            "meaningful",
        ),
        text=("agent",),
    )
    for agent, r in reports.items():
        lo, hi = r.ece_ci
        t.add_row(
            "all agents" if agent == fa.ALL else agent,
            str(r.count),
            f"{r.n_eff:.0f}",
            f"{ac.fmt(r.ece)} [{ac.fmt(lo)}, {ac.fmt(hi)}]",
            ac.fmt(r.mce),
            ac.fmt(r.brier),
            ac.fmt(r.accuracy),
            ac.fmt(r.mean_confidence),
            f"{r.overconfidence_gap:+.3f}" if r.weight > 0 else "-",
            "yes" if r.meaningful else f"[yellow]no[/] ({r.reason})",
        )
    return t


def reliability_table(agent: str, r: CalibrationReport) -> Table:
    """The reliability diagram of one report as a table (bins with weight only)."""
    t = ac.titled_table(
        f"reliability diagram: {agent}",
        ("confidence bin", "items", "weight", "mean conf", "accuracy [95% CI]", "gap"),
        text=(),
    )
    for b in r.bins:
        if b.weight <= 0:
            continue
        lo, hi = b.accuracy_ci
        t.add_row(
            f"[{b.lo:.1f}, {b.hi:.1f}{']' if b.hi >= 1 else ')'}",
            str(b.count),
            f"{b.weight:.1f}",
            ac.fmt(b.mean_confidence),
            f"{ac.fmt(b.accuracy)} [{ac.fmt(lo)}, {ac.fmt(hi)}]",
            f"{b.gap:+.3f}",
        )
    return t


def judge_labels_text(agent: str, jl: JudgeLabels) -> str:
    """Says that (and how much of) an agent's report rests on judge labels, each judge's
    measured precision/recall, and the raw vs Rogan-Gladen corrected success rate."""
    lines = [
        f"[yellow]{agent}[/]: {jl.judge_labelled_items} of {jl.labelled_items} labelled "
        f"items ({jl.judge_share:.1%}) are labelled by judges, not outcomes"
    ]
    for c in jl.judges:
        q = c.quality
        meas = (
            "quality not measured (no judged conversation with an outcome)"
            if q is None
            else f"precision {ac.fmt(q.precision.value, 2)} [{ac.fmt(q.precision.low, 2)}, "
            f"{ac.fmt(q.precision.high, 2)}], recall {ac.fmt(q.recall.value, 2)} "
            f"[{ac.fmt(q.recall.low, 2)}, {ac.fmt(q.recall.high, 2)}] on {q.pairs} "
            "conversations with an outcome"
        )
        acc = c.accuracy
        corr = (
            ""
            if acc is None
            else f"; success rate as judged {ac.fmt(acc.raw)}, corrected "
            f"(Rogan-Gladen) {ac.fmt(acc.corrected)}" + (f" ({acc.note})" if acc.note else "")
        )
        lines.append(
            f"  {c.judge} {c.judge_version}: {meas}; judged {c.judged_without_outcome}"
            f" conversations without an outcome, flagged {c.flagged_without_outcome}"
            f"{corr}"
        )
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Calibration of the agents' confidence: report, recalibration maps.",
        invoke_without_command=True,
        no_args_is_help=False,
    )
    app.add_typer(group, name="calibration")

    @group.callback()
    @ac.scoped("agent", "domain", "tier", "version")
    def report(
        ctx: typer.Context,
        scope: ac.Scope,
        min_samples: float = typer.Option(
            DEFAULT_MIN_SAMPLES,
            "--min-samples",
            help="Effective items below which numbers are reported as not meaningful.",
        ),
        diagram: bool = typer.Option(
            True, "--diagram/--no-diagram", help="Print each agent's reliability diagram."
        ),
        as_json: bool = ac.JSON,
    ) -> None:
        """Calibration per agent: ECE, MCE, Brier, accuracy, confidence gap, reliability bins.

        Weighted by the sampling weights; intervals are 95% (parametric bootstrap over the bin
        sums for ECE and Brier, Wilson for accuracies).
        """
        if ctx.invoked_subcommand is not None:
            return
        console = ac.console()
        q = scope.query()

        async def both(
            eng: ac.AsyncEngine,
        ) -> tuple[dict[str, CalibrationReport], dict[str, JudgeLabels]]:
            reports = await fa.calibration(eng, q.segment, q.start, q.end, min_samples=min_samples)
            return reports, await judge_labels(eng, q.segment, q.start, q.end)

        reports, judged = ac.run_with_engine(console, both, reads=True)
        if as_json:
            ac.print_json({"scope": q.describe(), "agents": reports, "judge_labels": judged})
            return
        if not reports:
            console.print(f"no labelled items for {q.describe()}")
            return
        ac.print_table(console, calibration_table(reports, f"calibration ({q.describe()})"))
        for name, jl in judged.items():
            console.print(judge_labels_text(name, jl))
        if diagram:
            for name, r in reports.items():
                if name != fa.ALL:
                    console.print(reliability_table(name, r))

    @group.command("fit")
    @ac.scoped(
        "agent",
        "domain",
        since=typer.Option("7d", "--since", help="Fit on the labelled items of the last DURATION."),
    )
    def fit(
        scope: ac.Scope,
        min_items: int = typer.Option(200, "--min-items", help="Fewest labelled items to fit."),
        as_json: bool = ac.JSON,
    ) -> None:
        """Fit isotonic recalibration maps per agent and domain, store them as new versions,
        and report ECE before and after on held-out items (30%)."""
        console = ac.console()
        q = scope.query()
        results = ac.run_with_engine(
            console, lambda eng: fa.fit_maps(eng, q.segment, q.start, q.end, min_items=min_items)
        )
        if as_json:
            ac.print_json([_fit_row(k, v) for k, v in results.items()])
            return
        t = ac.titled_table(
            f"recalibration ({q.describe()})",
            (
                "agent",
                "domain",
                "train",
                "held out",
                "ECE before",
                "ECE after",
                "Brier before",
                "Brier after",
                "note",
            ),
        )
        for (a, d), r in results.items():
            if isinstance(r, RecalibrationResult):
                t.add_row(
                    a,
                    d or "-",
                    str(r.n_train),
                    str(r.n_holdout),
                    ac.fmt(r.ece_before),
                    ac.fmt(r.ece_after),
                    ac.fmt(r.brier_before),
                    ac.fmt(r.brier_after),
                    "stored",
                )
            else:
                t.add_row(a, d or "-", "-", "-", "-", "-", "-", "-", f"[yellow]{r}[/]")
        console.print(t if results else f"no labelled items for {q.describe()}")

    @group.command("show")
    def show(
        agent: str = typer.Argument(..., help="Agent id."),
        as_json: bool = ac.JSON,
    ) -> None:
        """Show the current recalibration map(s) of an agent (what GET /v1/calibration/{agent}
        serves): one per domain, latest version."""
        console = ac.console()
        maps = ac.run_with_engine(console, lambda eng: current_maps(eng, agent), reads=True)
        if as_json:
            ac.print_json({"agent_id": agent, "maps": maps})
            if not maps:  # same exit code as the table: scripts see the agent has none
                raise typer.Exit(1)
            return
        if not maps:
            console.print(f"no recalibration map for {agent!r}: run `monitor calibration fit`")
            raise typer.Exit(1)
        for m in maps:
            t = Table(
                title=f"{agent} / {m.domain or 'all domains'}: v{m.version}, fitted "
                f"{m.fitted_at:%Y-%m-%d %H:%M}, held-out ECE {ac.fmt(m.ece_before)} -> "
                f"{ac.fmt(m.ece_after)}",
                title_justify="left",
            )
            t.add_column("raw confidence", justify="right")
            t.add_column("recalibrated", justify="right")
            for x, y in zip(m.map.xs, m.map.ys, strict=True):
                t.add_row(f"{x:.3f}", f"{y:.3f}")
            console.print(t)


def _fit_row(key: tuple[str, str], r: RecalibrationResult | str) -> dict[str, Any]:
    base = {"agent_id": key[0], "domain": key[1]}
    if isinstance(r, str):
        return {**base, "stored": False, "reason": r}
    return {**base, "stored": True, **r.to_dict()}
