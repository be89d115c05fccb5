"""The report's figures (matplotlib, Agg backend): each function returns PNG bytes.

Inputs are the values :mod:`monitor.analytics.reports` returns; nothing here reads a database.
Every figure has a title, labelled axes and a legend; an empty input gives a figure that says
"no data" rather than an error. Every label is plain text: matplotlib's math syntax
(``$...$``) is not parsed, so an agent id, domain or version is drawn as written.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from datetime import datetime
from typing import ParamSpec

import matplotlib

matplotlib.use("Agg")

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from monitor.analytics.calibration import CalibrationReport
from monitor.analytics.reports import ALL, EscalationSummary
from monitor.analytics.thresholds import Recommendation, ThresholdTable

DPI = 100
P = ParamSpec("P")
COMPACT = (4.8, 4.0)  # one agent's chart, shown next to the others (report_html's grid)


def _plain_text(plot: Callable[P, bytes]) -> Callable[P, bytes]:
    """``plot`` with math parsing off for every text it creates (titles, legends, labels)."""

    @functools.wraps(plot)
    def run(*args: P.args, **kwargs: P.kwargs) -> bytes:
        with matplotlib.rc_context({"text.parse_math": False}):
            return plot(*args, **kwargs)

    return run


def _figure(compact: bool, wide: tuple[float, float]) -> tuple[Figure, Axes]:
    fig, ax = plt.subplots(figsize=COMPACT if compact else wide)
    return fig, ax


def _legend(ax: Axes, compact: bool) -> None:
    if compact:  # inside the axes: the figure stays narrow and its text readable on a phone
        ax.legend(loc="best", fontsize=7)
    else:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _empty(title: str) -> bytes:
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.set_title(title)
    ax.text(0.5, 0.5, "no data in this range and scope", ha="center", va="center")
    ax.set_axis_off()
    return _png(fig)


def _label(agent: str) -> str:
    return "all agents" if agent == ALL else agent


@_plain_text
def reliability_diagram(reports: dict[str, CalibrationReport]) -> bytes:
    """One panel per agent (and all agents): accuracy per confidence bin as bars against the
    diagonal, with each bin's share of the weight as grey bars on a second axis."""
    title = "Reliability diagram"
    if not reports:
        return _empty(title)
    n = len(reports)
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 4.2 * rows), squeeze=False)
    for ax, (agent, r) in zip(axes.flat, reports.items(), strict=False):
        total = max(r.weight, 1e-12)
        used = [b for b in r.bins if b.weight > 0]
        centers = [(b.lo + b.hi) / 2 for b in used]
        width = (r.bins[0].hi - r.bins[0].lo) * 0.85 if r.bins else 0.085
        share = ax.twinx()
        share.bar(
            centers,
            [b.weight / total for b in used],
            width=width,
            color="#bbbbbb",
            alpha=0.45,
            label="weight share (right axis)",
            zorder=1,
        )
        share.set_ylim(0, 1)
        share.set_ylabel("share of weight", color="#777777")
        ax.set_zorder(share.get_zorder() + 1)
        ax.patch.set_visible(False)
        ax.bar(
            centers,
            [b.accuracy for b in used],
            width=width * 0.6,
            color="#1f77b4",
            label="accuracy",
            zorder=3,
        )
        ax.plot(
            [0, 1], [0, 1], "--", color="#d62728", lw=1.5, label="perfect calibration", zorder=4
        )
        ax.plot(
            centers,
            [b.mean_confidence for b in used],
            "o",
            color="#ff7f0e",
            ms=4,
            label="mean confidence",
            zorder=5,
        )
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("stated confidence")
        ax.set_ylabel("accuracy")
        ax.set_title(
            f"{_label(agent)}\nECE {r.ece:.3f}, Brier {r.brier:.3f}, n={r.count}", fontsize=10
        )
        ax.grid(alpha=0.3)
        handles = ax.get_legend_handles_labels()
        extra = share.get_legend_handles_labels()
        ax.legend(handles[0] + extra[0], handles[1] + extra[1], loc="upper left", fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.set_axis_off()
    fig.suptitle(title, fontsize=13)
    fig.tight_layout()
    return _png(fig)


def _time_axis(ax: Axes) -> None:
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M"))  # type: ignore[no-untyped-call]
    for label in ax.get_xticklabels():
        label.set_rotation(30)
        label.set_horizontalalignment("right")


@_plain_text
def ece_over_time(series: dict[str, list[tuple[datetime, float]]], compact: bool = False) -> bytes:
    """ECE per agent per time bucket (UTC); ``compact``: a small figure for one agent."""
    title = "ECE over time" if compact else "ECE over time per agent"
    if not series:
        return _empty(title)
    fig, ax = _figure(compact, (10, 4.5))
    for agent, points in series.items():
        xs = mdates.date2num([t for t, _ in points])  # type: ignore[no-untyped-call]
        ax.plot(xs, [v for _, v in points], marker="o", ms=3, label=agent)
    ax.set_title(title)
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel("ECE (0 = calibrated)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend(ax, compact)
    _time_axis(ax)
    return _png(fig)


@_plain_text
def escalation_by_bin(summaries: dict[str, EscalationSummary], compact: bool = False) -> bytes:
    """Weighted escalation rate per minimum-confidence bin, one line per agent."""
    title = "Escalation rate by minimum-confidence bin (should fall as confidence rises)"
    if compact:
        title = "Escalation rate by min confidence\n(should fall as confidence rises)"
    if not summaries:
        return _empty(title)
    fig, ax = _figure(compact, (10, 4.5))
    for agent, s in summaries.items():
        pts = [((b.lower + b.upper) / 2, b.rate) for b in s.bins if b.rate is not None]
        tag = " (INVERTED)" if s.inversion.inverted else ""
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=f"{agent}{tag}")
    ax.set_title(title)
    ax.set_xlabel("minimum confidence of the conversation (bin centre)")
    ax.set_ylabel("escalation rate")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    _legend(ax, compact)
    return _png(fig)


@_plain_text
def threshold_curve(
    tables: dict[str, tuple[ThresholdTable, Recommendation]], compact: bool = False
) -> bytes:
    """Escalation rate (x) against the residual failure rate (y) as the threshold on the
    minimum confidence moves; the recommended threshold of each agent is circled."""
    title = "Threshold curve: escalate when min confidence < t"
    if not tables:
        return _empty(title)
    fig, ax = _figure(compact, (10, 5))
    for agent, (table, rec) in tables.items():
        rows = [r for r in table.rows if r.residual_failure_rate is not None]
        xs = [r.escalation_rate for r in rows]
        ys = [r.residual_failure_rate or 0.0 for r in rows]
        (line,) = ax.plot(xs, ys, marker=".", label=agent)
        last: tuple[float, float] | None = None
        for r, x, y in zip(rows, xs, ys, strict=True):
            if round(r.threshold * 10) % 2 == 0 and (x, y) != last:
                last = (x, y)
                ax.annotate(
                    f"{r.threshold:.1f}",
                    (x, y),
                    textcoords="offset points",
                    xytext=(3, 3),
                    fontsize=6,
                    color=line.get_color(),
                )
        if rec.row is not None and rec.row.residual_failure_rate is not None:
            ax.plot(
                [rec.row.escalation_rate],
                [rec.row.residual_failure_rate],
                "o",
                ms=11,
                mfc="none",
                mec=line.get_color(),
                color=line.get_color(),
            )
    ax.plot([], [], "o", ms=11, mfc="none", mec="black", label="recommended threshold")
    ax.set_title(title)
    ax.set_xlabel("escalation rate (share of conversations escalated)")
    ax.set_ylabel("residual failure rate (not escalated)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend(ax, compact)
    return _png(fig)
