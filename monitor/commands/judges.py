"""``monitor judges``: what the judges produced and how well they agree with ground truth.

Per judge (name and version): verdicts, errors with their reasons, failures found (label 0),
latency p50/p90, failure categories; then per judge the agreement with the outcome of the
conversation on the same items: accuracy and Cohen's kappa with the confusion counts.
"""

from __future__ import annotations

import typer
from rich.table import Table

from monitor.commands import analytics_common as ac
from monitor.metrics.agreement import Agreement, agreement
from monitor.store.judge_stats import JudgeVolume, judge_volumes, label_pairs


async def _collect(
    engine: ac.AsyncEngine, q: ac.Query
) -> tuple[list[JudgeVolume], dict[str, Agreement]]:
    volumes = await judge_volumes(engine, q.segment, q.start, q.end)
    pairs = await label_pairs(engine, q.segment, q.start, q.end)
    return volumes, {j: agreement(js, ts) for j, (js, ts) in pairs.items()}


def register(app: typer.Typer) -> None:
    @app.command("judges")
    def judges(
        agent: str | None = ac.AGENT,
        since: str = ac.SINCE,
        start: str | None = ac.FROM,
        end: str | None = ac.TO,
        as_json: bool = ac.JSON,
    ) -> None:
        """Judge volumes, errors, latency, failure categories, and agreement with ground truth
        (accuracy and Cohen's kappa on items whose conversation has an outcome).

        The range (--since, --from/--to) selects conversations by when they happened (their
        first event), like the other analytics commands, not by when they were judged."""
        console = ac.console()
        q = ac.query(agent, None, None, None, since, start, end)
        volumes, agree = ac.run_with_engine(console, lambda eng: _collect(eng, q))
        if as_json:
            ac.print_json({"scope": q.describe(), "judges": volumes, "agreement": agree})
            return
        if not volumes:
            console.print(f"no verdicts for {q.describe()}")
            return
        t = Table(title=f"judges ({q.describe()})", title_justify="left")
        for col in ("judge", "version", "verdicts", "errors", "failures found",
                    "latency p50/p90 ms", "top categories"):  # fmt: skip
            t.add_column(col, justify="left" if col in ("judge", "top categories") else "right")
        for v in volumes:
            cats = ", ".join(f"{c} {n}" for c, n in sorted(v.categories.items(),
                             key=lambda kv: -kv[1])[:3])  # fmt: skip
            errs = ", ".join(f"{r} {n}" for r, n in v.error_reasons.items())
            t.add_row(v.judge, v.judge_version, str(v.verdicts),
                      f"{v.errors}" + (f" ({errs})" if errs else ""), str(v.failures),
                      f"{ac.fmt(v.latency_p50_ms, 1)}/{ac.fmt(v.latency_p90_ms, 1)}",
                      cats or "-")  # fmt: skip
        ac.print_table(console, t)
        a = Table(title="agreement with ground truth (items whose conversation has an outcome)",
                  title_justify="left")  # fmt: skip
        for col in ("judge", "pairs", "accuracy", "Cohen's kappa", "judge 1/truth 0 (missed)",
                    "judge 0/truth 1 (false alarm)", "note"):  # fmt: skip
            a.add_column(col, justify="left" if col in ("judge", "note") else "right")
        for j, g in agree.items():
            a.add_row(j, str(g.n), ac.fmt(g.accuracy), ac.fmt(g.kappa), str(g.false_pos),
                      str(g.false_neg), g.reason or "")  # fmt: skip
        console.print(a)
