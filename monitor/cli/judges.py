"""``monitor judges``: what the judges produced and how precise they are against ground truth.

Per judge (name and version): verdicts, errors with their reasons, failures found (label 0),
latency p50/p90, failure categories, conversations judged on capped events (above
``MONITOR_JUDGE_MAX_EVENTS``); then the **quality report** at the conversation level
(:mod:`monitor.judges.quality`): per judge and per category, precision and recall of
"the judge flagged the conversation" against "the conversation failed" with Wilson intervals and
the number of pairs, the confusion counts and Cohen's kappa, and whether the judge labels items
or is below the precision floor (then it stops labelling items; its verdicts stay shown). With
``--flags N``, the N latest failures (``--flags-of``: of which judges) with what was wrong and
the events they rest on: for a domain policy rule, the tool call, the reason, the clause and the
tool results / user turns cited.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table
from sqlalchemy import text

from monitor.analytics.calibration import Proportion
from monitor.cli import analytics_common as ac
from monitor.config import load_settings
from monitor.judges.quality import ANY_DETERMINISTIC, ANY_JUDGE, JudgeQuality
from monitor.judges.quality import judge_quality as measure
from monitor.judges.stats import (
    Flag,
    JudgeVolume,
    conversation_judgements,
    judge_volumes,
    recent_flags,
)


async def _collect(
    engine: ac.AsyncEngine, q: ac.Query, floor: float, min_pairs: int, flags: int, like: str
) -> tuple[list[JudgeVolume], list[JudgeQuality], list[dict[str, Any]], list[Flag]]:
    volumes = await judge_volumes(engine, q.segment, q.start, q.end)
    found = await recent_flags(engine, q.segment, q.start, q.end, flags, like) if flags else []
    judgements = await conversation_judgements(engine, q.segment, q.start, q.end)
    async with engine.connect() as conn:
        stored = (
            (
                await conn.execute(
                    text(
                        "SELECT judge, judge_version, muted, precision, flagged, computed_at"
                        " FROM judge_quality ORDER BY 1, 2"
                    )
                )
            )
            .mappings()
            .all()
        )
    return volumes, measure(judgements, floor, min_pairs), [dict(r) for r in stored], found


def _p(p: Proportion) -> str:
    if p.value is None:
        return f"- (0/{p.n})"
    return f"{p.value:.2f} [{p.low:.2f}, {p.high:.2f}] ({p.k}/{p.n})"


def _status(row: JudgeQuality, muted: set[tuple[str, str]], floor: float, min_pairs: int) -> str:
    if row.category is not None or row.judge in (ANY_DETERMINISTIC, ANY_JUDGE):
        return ""
    if row.below_floor or row.key in muted:
        return f"[red]precision below the floor {floor:g}: stops labelling items[/]" + (
            " (applied by the worker)" if row.key in muted else ""
        )
    if row.precision.n < min_pairs:
        return f"labels items (floor not tested: {row.precision.n} < {min_pairs} flagged)"
    return "labels items"


def register(app: typer.Typer) -> None:
    @app.command("judges")
    @ac.scoped("agent")
    def judges(
        scope: ac.Scope,
        floor: float | None = ac.unit_option(
            None, "--floor", "Precision floor (default: MONITOR_JUDGE_PRECISION_FLOOR, 0.7)."
        ),
        min_pairs: int | None = typer.Option(
            None,
            "--min-pairs",
            min=1,
            help="Flagged conversations needed to test the floor (default 30).",
        ),
        flags: int = typer.Option(
            0,
            "--flags",
            min=0,
            max=1000,
            help="Also list the N latest failures with what was wrong and their evidence.",
        ),
        flags_of: str = typer.Option(
            "*", "--flags-of", help="Judges whose failures --flags lists (* wildcard)."
        ),
        as_json: bool = ac.JSON,
    ) -> None:
        """Judge volumes, errors, latency, failure categories, and each judge's precision and
        recall against conversation outcomes (Wilson intervals, kappa, confusion counts); a
        judge below the precision floor stops labelling items.

        The range (--since, --from/--to) selects conversations by when they happened (their
        first event), like the other analytics commands, not by when they were judged."""
        console = ac.console()
        settings = load_settings()
        fl = settings.judge_precision_floor if floor is None else floor
        mp = settings.judge_floor_min_pairs if min_pairs is None else min_pairs
        q = scope.query()
        like = flags_of.replace("%", r"\%").replace("_", r"\_").replace("*", "%")
        volumes, quality, stored, found = ac.run_with_engine(
            console, lambda eng: _collect(eng, q, fl, mp, flags, like), reads=True
        )
        muted = {(r["judge"], r["judge_version"]) for r in stored if r["muted"]}
        if as_json:
            ac.print_json(
                {
                    "scope": q.describe(),
                    "judges": volumes,
                    "quality": quality,
                    "floor": {"precision": fl, "min_pairs": mp},
                    "stored": stored,
                    "flags": found,
                }
            )
            return
        if not volumes:
            console.print(f"no verdicts for {q.describe()}")
            return
        t = ac.titled_table(
            f"judges ({q.describe()})",
            (
                "judge",
                "version",
                "verdicts",
                "errors",
                "failures found",
                "latency p50/p90 ms",
                "top categories",
            ),
            text=("judge", "top categories"),
        )
        for v in volumes:
            cats = ", ".join(
                f"{c} {n}" for c, n in sorted(v.categories.items(), key=lambda kv: -kv[1])[:3]
            )
            errs = ", ".join(f"{r} {n}" for r, n in v.error_reasons.items())
            t.add_row(
                v.judge,
                v.judge_version,
                str(v.verdicts),
                f"{v.errors}" + (f" ({errs})" if errs else ""),
                str(v.failures),
                f"{ac.fmt(v.latency_p50_ms, 1)}/{ac.fmt(v.latency_p90_ms, 1)}",
                cats or "-",
            )
        ac.print_table(console, t)
        for v in volumes:
            if v.truncated:
                console.print(
                    f"{v.judge} {v.judge_version}: {v.truncated} conversation(s) above the cap, "
                    "judged on their first and last events only (each verdict's "
                    "evidence.truncated; MONITOR_JUDGE_MAX_EVENTS is now "
                    f"{settings.judge_max_events})"
                )
        a = Table(
            title="quality against ground truth, per conversation with an outcome the "
            "judge applied to (flagged = it found a failure; positive = the conversation "
            "failed; 95 % Wilson intervals)",
            title_justify="left",
        )
        for col in (
            "judge",
            "category",
            "pairs",
            "precision",
            "recall",
            "kappa",
            "tp/fp/fn/tn",
            "status",
        ):
            left = col in ("judge", "category", "status")
            a.add_column(
                col,
                justify="left" if left else "right",
                no_wrap=col in ("status", "precision", "recall"),
            )
        for r in quality:
            a.add_row(
                f"{r.judge} {r.judge_version}".strip(),
                r.category or "(all)",
                str(r.pairs),
                _p(r.precision),
                _p(r.recall),
                ac.fmt(r.kappa, 2),
                f"{r.true_pos}/{r.false_pos}/{r.false_neg}/{r.true_neg}",
                _status(r, muted, fl, mp),
            )
        console.print(a)
        if found:
            console.print(_flags_table(found))


def _flags_table(found: list[Flag]) -> Table:
    """The latest failures: judge, conversation and message, what was wrong (the rationale:
    for a policy rule the call, the reason and the clause) and the evidence's event ids."""
    t = Table(
        title="latest failures (what was wrong, and the events it rests on)", title_justify="left"
    )
    for col in ("judge", "conversation / message", "what was wrong", "evidence"):
        t.add_column(col, justify="left", overflow="fold")
    for f in found:
        cited = [
            str(e.get("event_id")) for e in f.evidence.get("evidence") or [] if isinstance(e, dict)
        ]
        t.add_row(
            f.judge,
            f"{f.conversation_id}\n{f.item_id or '-'}",
            f.rationale or "-",
            ", ".join(cited) or "-",
        )
    return t
