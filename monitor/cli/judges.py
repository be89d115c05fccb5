"""``monitor judges``: what the judges produced and how precise they are against ground truth.

Per judge (name and version): verdicts, errors with their reasons, failures found (label 0),
latency p50/p90, failure categories, conversations judged on capped events (above
``MONITOR_JUDGE_MAX_EVENTS``); then the **quality report** at the conversation level
(:mod:`monitor.judges.quality`): per judge and per category, precision and recall of
"the judge flagged the conversation" against "the conversation failed" with Wilson intervals and
the number of pairs, the confusion counts and Cohen's kappa; then the **labelling** per judge and
scope (agent x domain): the precision's interval there, the flagged conversations behind it,
whether the scope's own interval or the judge's pooled one decides, and whether the judge labels
the scope's items (the lower end clears the floor), as measured on the range and as the
worker last applied it (``judge_quality``). A judge that does not label keeps its verdicts
shown. With
``--flags N``, the N latest failures (``--flags-of``: of which judges) with what was wrong and
the events they rest on: for a domain policy rule, the tool call, the reason, the clause and the
tool results / user turns cited.
"""

from __future__ import annotations

from dataclasses import dataclass

import typer
from rich.table import Table

from monitor.analytics.calibration import Proportion
from monitor.cli import analytics_common as ac
from monitor.config import load_settings
from monitor.judges.quality import (
    ANY_DETERMINISTIC,
    ANY_JUDGE,
    POOLED,
    JudgeQuality,
    ScopeLabelling,
    labelling,
)
from monitor.judges.quality import judge_quality as measure
from monitor.judges.stats import (
    Flag,
    JudgeVolume,
    StoredLabelling,
    conversation_judgements,
    judge_volumes,
    recent_flags,
    stored_labelling,
)


@dataclass
class _Collected:
    volumes: list[JudgeVolume]
    quality: list[JudgeQuality]
    labelling: list[ScopeLabelling]
    stored: list[StoredLabelling]
    flags: list[Flag]


async def _collect(
    engine: ac.AsyncEngine, q: ac.Query, floor: float, min_pairs: int, flags: int, like: str
) -> _Collected:
    volumes = await judge_volumes(engine, q.segment, q.start, q.end)
    found = await recent_flags(engine, q.segment, q.start, q.end, flags, like) if flags else []
    judgements = await conversation_judgements(engine, q.segment, q.start, q.end)
    return _Collected(
        volumes,
        measure(judgements, floor, min_pairs),
        labelling(judgements, floor, min_pairs),
        await stored_labelling(engine, q.segment),
        found,
    )


def _p(p: Proportion) -> str:
    if p.value is None:
        return f"- (0/{p.n})"
    return f"{p.value:.2f} [{p.low:.2f}, {p.high:.2f}] ({p.k}/{p.n})"


def _status(row: JudgeQuality, floor: float) -> str:
    """The pooled decision of a judge row (per scope: the labelling table)."""
    if row.category is not None or row.judge in (ANY_DETERMINISTIC, ANY_JUDGE):
        return ""
    if row.labels:
        return f"labels items (pooled lower end {row.precision.low:.2f} >= {floor:g})"
    if row.precision.low is None:
        return "[red]labels nothing: no flagged conversation with an outcome[/]"
    return f"[red]labels nothing: pooled lower end {row.precision.low:.2f} < {floor:g}[/]"


def _labels(labels: bool | None) -> str:
    if labels is None:
        return "-"
    return "yes" if labels else "[red]no[/]"


def _labelling_table(
    computed: list[ScopeLabelling], stored: list[StoredLabelling], floor: float, min_pairs: int
) -> Table:
    """Per judge and scope: interval, flagged conversations, what decides, and whether the
    judge labels (on the range; and as the worker applied it)."""
    applied = {(r.judge, r.judge_version, r.agent_id, r.domain): r.labels for r in stored}
    pooled = {(r.judge, r.judge_version): r.labels for r in stored if r.agent_id == POOLED}
    t = Table(
        title=f"labelling per scope: a judge labels a scope's items when the lower end of its "
        f"precision's interval clears {floor:g} (the scope's own once it has {min_pairs} "
        "flagged conversations, else the judge's pooled one)",
        title_justify="left",
    )
    for col in ("judge", "agent", "domain", "pairs", "precision", "decided by", "labels"):
        t.add_column(col, justify="right" if col == "pairs" else "left", no_wrap=True)
    t.add_column("applied by the worker", justify="left", no_wrap=True)
    for d in computed:
        key = (d.judge, d.judge_version, d.agent_id, d.domain)
        worker = applied.get(key, pooled.get((d.judge, d.judge_version)))
        t.add_row(
            f"{d.judge} {d.judge_version}".strip(),
            "(pooled)" if d.agent_id == POOLED else d.agent_id,
            "" if d.agent_id == POOLED else d.domain or "-",
            str(d.pairs),
            _p(d.precision),
            d.decided_by,
            _labels(d.labels),
            _labels(worker),
        )
    return t


def register(app: typer.Typer) -> None:
    @app.command("judges")
    @ac.scoped("agent")
    def judges(
        scope: ac.Scope,
        floor: float | None = ac.unit_option(
            None,
            "--floor",
            "Precision floor the lower end of the interval must clear (default: "
            "MONITOR_JUDGE_PRECISION_FLOOR, 0.7).",
        ),
        min_pairs: int | None = typer.Option(
            None,
            "--min-pairs",
            min=1,
            help="Flagged conversations a scope needs before its own interval decides, not "
            "the judge's pooled one (default: MONITOR_JUDGE_FLOOR_MIN_PAIRS, 30).",
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
        recall against conversation outcomes (Wilson intervals, kappa, confusion counts), and
        per judge and scope whether it labels items: only when the lower end of its precision's
        interval clears the floor.

        The range (--since, --from/--to) selects conversations by when they happened (their
        first event), like the other analytics commands, not by when they were judged."""
        console = ac.console()
        settings = load_settings()
        fl = settings.judge_precision_floor if floor is None else floor
        mp = settings.judge_floor_min_pairs if min_pairs is None else min_pairs
        q = scope.query()
        like = flags_of.replace("%", r"\%").replace("_", r"\_").replace("*", "%")
        got = ac.run_with_engine(
            console, lambda eng: _collect(eng, q, fl, mp, flags, like), reads=True
        )
        volumes, quality, found = got.volumes, got.quality, got.flags
        if as_json:
            ac.print_json(
                {
                    "scope": q.describe(),
                    "judges": volumes,
                    "quality": quality,
                    "labelling": got.labelling,
                    "floor": {"precision": fl, "min_pairs": mp},
                    "stored": got.stored,
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
                _status(r, fl),
            )
        console.print(a)
        if got.labelling:
            console.print(_labelling_table(got.labelling, got.stored, fl, mp))
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
