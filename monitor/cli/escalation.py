"""``monitor escalation``, ``monitor thresholds``, ``monitor passk``: conversation-level views.

Every number is over conversations whose first event is in the range and that are in the
probability sample (weighted by their inverse inclusion probability).
"""

from __future__ import annotations

import typer
from rich.table import Table

from monitor.analytics import reports as fa
from monitor.analytics.advisor import Advice, WeightedProportion
from monitor.cli import analytics_common as ac


def escalation_table(summaries: dict[str, fa.EscalationSummary], threshold: float) -> Table:
    """One row per agent: inversion verdict, timing, missed escalations."""
    t = ac.titled_table(
        "escalation",
        (
            "agent",
            "convs",
            "escalated",
            "rank corr (p)",
            "inverted",
            "turns to esc med/p90",
            "seconds med/p90",
            f"missed (<{threshold:g}, failed, not esc)",
        ),
        text=("agent",),
    )
    for agent, s in summaries.items():
        inv = s.inversion
        corr = (
            f"{inv.spearman_rho:+.2f} ({inv.spearman_pvalue:.3g})"
            if inv.spearman_rho is not None and inv.spearman_pvalue is not None
            else "-"
        )
        tm = s.timing
        t.add_row(
            agent,
            str(s.conversations),
            str(s.escalated),
            corr,
            "[red bold]YES[/]" if inv.inverted else "no",
            f"{ac.fmt(tm.median_turns, 1)}/{ac.fmt(tm.p90_turns, 1)}",
            f"{ac.fmt(tm.median_seconds, 0)}/{ac.fmt(tm.p90_seconds, 0)}",
            f"{s.missed.count} ({ac.fmt(s.missed.rate, 2)})",
        )
    return t


def rate_by_bin_table(summaries: dict[str, fa.EscalationSummary]) -> Table:
    """Escalation rate per confidence bin (rows) and agent (columns); should fall downwards."""
    t = Table(
        title="escalation rate by minimum-confidence bin (should fall as confidence rises)",
        title_justify="left",
    )
    t.add_column("confidence bin", justify="right")
    agents = list(summaries)
    for a in agents:
        t.add_column(a, justify="right")
    n_bins = len(next(iter(summaries.values())).bins) if summaries else 0
    for b in range(n_bins):
        first = summaries[agents[0]].bins[b]
        cells = []
        for a in agents:
            eb = summaries[a].bins[b]
            cells.append("-" if eb.rate is None else f"{eb.rate:.2f} (n={eb.n})")
        t.add_row(f"[{first.lower:.1f}, {first.upper:.1f})", *cells)
    return t


def _rate(r: WeightedProportion | None) -> str:
    if r is None or r.value is None:
        return "-"
    return f"{r.value:.3f} [{r.low:.3f}, {r.high:.3f}]"


def advice_text(agent: str, adv: Advice | None) -> str:
    """The advisor's answer in a few lines (rates with their 95 % Wilson intervals)."""
    if adv is None:
        return (
            f"[bold]{agent}[/]: no question asked (give --keep, --budget and/or --target "
            "for a recommended threshold)"
        )
    if adv.threshold is None:
        return f"[bold]{agent}[/] ({adv.question}): no threshold: {adv.reason}"
    lines = [
        f"[bold]{agent}[/] ({adv.question}): escalate below min confidence "
        f"[bold]{adv.threshold:.4g}[/] ({adv.reason})",
        f"  escalated share      {_rate(adv.escalated_share)}  ({adv.n_escalated} of "
        f"{adv.n_conversations} conversations)",
        f"  residual error rate  {_rate(adv.residual_error)}  (kept, with an outcome: "
        f"{adv.n_kept_with_outcome}; no escalation: {_rate(adv.base_error)})",
        f"  failures prevented   {_rate(adv.failures_prevented)}  (share of all failures; "
        f"error rate reduced by {ac.fmt(adv.error_rate_reduction)})",
    ]
    if adv.tied_at_cut:
        lines.append(
            f"  ties at the cut      {adv.tied_at_cut} conversations at exactly "
            f"{adv.threshold:.4g} are kept; escalating them too would escalate "
            f"{ac.fmt(adv.escalated_share_with_ties)}"
        )
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    @app.command("escalation")
    @ac.scoped("agent", "domain", "tier", "version")
    def escalation(
        scope: ac.Scope,
        threshold: float = ac.unit_option(
            0.5,
            "--threshold",
            "Confidence below which a failed, not escalated "
            "conversation counts as a missed escalation.",
        ),
        as_json: bool = ac.JSON,
    ) -> None:
        """Does escalation follow confidence? Rate per confidence bin, inversion test (one-sided
        rank correlation; flags escalation RISING with confidence), time to escalation in turns
        and seconds (median, p90), missed escalations."""
        console = ac.console()
        q = scope.query()
        out = ac.run_with_engine(
            console,
            lambda eng: fa.escalation(eng, q.segment, q.start, q.end, threshold=threshold),
            reads=True,
        )
        if as_json:
            ac.print_json({"scope": q.describe(), "agents": out})
            return
        if not out:
            console.print(f"no sampled conversations for {q.describe()}")
            return
        console.print(f"[dim]{q.describe()}[/]")
        ac.print_table(console, escalation_table(out, threshold))
        ac.print_table(console, rate_by_bin_table(out))

    @app.command("thresholds")
    @ac.scoped(
        "agent",
        "domain",
        "tier",
        "version",
        since=typer.Option("7d", "--since", help="Range: the last DURATION."),
    )
    def thresholds(
        scope: ac.Scope,
        keep: float | None = ac.unit_option(
            None,
            "--keep",
            "Keep this share of the most confident "
            "conversations, escalate the rest (0.8: escalate "
            "the least confident 20 %).",
        ),
        budget: float | None = ac.unit_option(
            None, "--budget", "Most conversations you can escalate (share)."
        ),
        target: float | None = ac.unit_option(
            None, "--target", "Target failure rate among the conversations NOT escalated."
        ),
        step: float = typer.Option(
            0.1,
            "--step",
            min=0.01,
            max=0.5,
            help="Spacing of the candidate thresholds in the table.",
        ),
        as_json: bool = ac.JSON,
    ) -> None:
        """Threshold advisor: for thresholds on a conversation's minimum confidence, the
        escalation rate, the failure rate among the rest and the failures caught; with --keep,
        --budget and/or --target, the exact cut that answers the question, the share escalated,
        the residual error among the kept and the failures prevented, with 95 % intervals."""
        console = ac.console()
        if keep is not None and budget is not None:
            console.print("[red]give --keep or --budget, not both (--keep 0.8 = --budget 0.2)[/]")
            raise typer.Exit(2)
        q = scope.query()
        n = round(1 / step)
        grid = [round(i / n, 6) for i in range(n + 1)]
        out = ac.run_with_engine(
            console,
            lambda eng: fa.threshold_advice(
                eng,
                q.segment,
                q.start,
                q.end,
                keep=keep,
                budget=budget,
                target=target,
                candidates=grid,
            ),
            reads=True,
        )
        if as_json:
            ac.print_json(
                {
                    "scope": q.describe(),
                    "agents": {a: {"rows": tb.rows, "advice": adv} for a, (tb, adv) in out.items()},
                }
            )
            return
        for a, (tb, adv) in out.items():
            console.print(advice_text(a, adv))
            t = ac.titled_table(
                f"{a}: what-if by threshold",
                (
                    "threshold",
                    "escalation rate",
                    "residual failure rate",
                    "failures caught",
                    "share caught",
                ),
                text=(),
            )
            for r in tb.rows:
                t.add_row(
                    f"{r.threshold:.2f}",
                    ac.fmt(r.escalation_rate),
                    ac.fmt(r.residual_failure_rate),
                    f"{r.failures_caught:.0f}",
                    ac.fmt(r.failures_caught_share),
                )
            ac.print_table(console, t)
        if not out:
            console.print(f"no sampled conversations for {q.describe()}")

    @app.command("passk")
    def passk(
        agent: str | None = ac.AGENT,
        domain: str | None = ac.DOMAIN,
        k: list[int] = typer.Option([1, 2], "--k", help="k values (repeat the option)."),
        since: str | None = typer.Option(
            None,
            "--since",
            help="Range: the last DURATION (30m, 24h, 7d ...). Default: "
            "every trial stored (trials of one task are often run days apart).",
        ),
        start: str | None = ac.FROM,
        end: str | None = ac.TO,
        as_json: bool = ac.JSON,
    ) -> None:
        """pass^k per agent for tasks run in several trials (context.task_id / trial), with
        the unbiased estimator C(c,k)/C(n,k) averaged over tasks with at least k trials.
        The range selects trials by when their conversation started."""
        console = ac.console()
        ranged = since is not None or start is not None or end is not None
        q = ac.query(agent, domain, None, None, since or "100000d", start, end)
        lo, hi = (q.start, q.end) if ranged else (None, None)

        async def all_k(eng: ac.AsyncEngine) -> dict[int, dict[str, fa.PassK]]:
            return {kk: await fa.passk(eng, q.segment, kk, lo, hi) for kk in k}

        out = ac.run_with_engine(console, all_k, reads=True)
        if as_json:
            ac.print_json({str(kk): v for kk, v in out.items()})
            return
        if not any(out.values()):
            where = f" in {q.describe()}" if ranged else ""
            console.print(
                f"no conversations with a task id and an outcome{where}: pass^k needs "
                "tasks run in several trials (context.task_id, context.trial)",
                soft_wrap=True,
            )
            return
        t = ac.titled_table(
            "pass^k (all k trials succeed) and pass@k",
            ("agent", "k", "tasks", "pass^k", "pass@k", "tasks with < k trials"),
        )
        for kk, per in out.items():
            for a, p in per.items():
                t.add_row(
                    a,
                    str(kk),
                    str(p.n_tasks),
                    ac.fmt(p.pass_hat_k),
                    ac.fmt(p.pass_at_k),
                    str(p.n_tasks_skipped),
                )
        ac.print_table(console, t)
