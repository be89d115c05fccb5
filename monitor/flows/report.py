"""``monitor report``: a self-contained HTML report (and PNGs) for a time range and scope.

Every number comes from the functions the CLI uses (:mod:`monitor.flows.analytics` with the
CLI's defaults), so the report's tables equal ``monitor calibration|escalation|thresholds
--json`` for the same scope and range. Each numeric cell carries its exact value in
``data-key`` / ``data-value`` attributes (the text shows it rounded); the PNGs are written next to
the HTML and embedded in it as base64, so the HTML opens anywhere on its own.
"""

from __future__ import annotations

import asyncio
import base64
import html
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor import report_plots as rp
from monitor.flows import analytics as fa
from monitor.metrics.bins import BinSums, sum_all
from monitor.metrics.calibration import CalibrationReport, ece
from monitor.metrics.thresholds import Recommendation, ThresholdTable
from monitor.store.analytics_repo import Segment, bin_series
from monitor.store.analytics_write import drift_history
from monitor.store.engine import make_engine

#: CLI defaults the report reproduces (``monitor escalation`` / ``monitor thresholds``).
MISSED_THRESHOLD = 0.5
TARGET_RESIDUAL_FAILURE = 0.1
THRESHOLD_GRID = [round(i / 10, 6) for i in range(11)]


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows, computed once."""

    segment: Segment
    start: datetime
    end: datetime
    calibration: dict[str, CalibrationReport]
    ece_series: dict[str, list[tuple[datetime, float]]]
    escalation: dict[str, fa.EscalationSummary]
    thresholds: dict[str, tuple[ThresholdTable, Recommendation]]
    drift: list[dict[str, Any]]
    alerts: list[dict[str, Any]]


def bucket_for(start: datetime, end: datetime) -> tuple[str, timedelta]:
    """``(stored resolution, bucket length)`` for about 30 points over ``[start, end)``."""
    span = end - start
    res, unit = ("1h", timedelta(hours=1)) if span > timedelta(days=2) else ("1m", timedelta(
        minutes=1))
    return res, max(unit, (span / 30 // unit) * unit)


async def ece_over_time(engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
                        ) -> dict[str, list[tuple[datetime, float]]]:
    """Per agent, ``(bucket start, ECE)`` from the bins summed per bucket (exact roll-up)."""
    res, step = bucket_for(start, end)
    series = await bin_series(engine, segment, start, end, res)
    grouped: dict[tuple[str, datetime], list[BinSums]] = {}
    for (agent, window), sums in series.items():
        bucket = start + ((window - start) // step) * step
        grouped.setdefault((agent, bucket), []).append(sums)
    out: dict[str, list[tuple[datetime, float]]] = {}
    for (agent, bucket), parts in sorted(grouped.items()):
        total = sum_all(parts)
        if float(total.weight.sum()) > 0:
            out.setdefault(agent, []).append((bucket, ece(total)))
    return out


async def firing_alerts(engine: AsyncEngine, segment: Segment) -> list[dict[str, Any]]:
    """Firing alerts (view ``v_alerts``) of the agents matched by ``segment``."""
    cond, params = Segment(segment.agent).where()
    sql = text(f"SELECT time, severity, rule, agent_id, domain, tier, value, threshold, summary"
               f" FROM v_alerts WHERE agent_id IS NULL OR ({cond}) ORDER BY time DESC")
    async with engine.connect() as conn:
        return [dict(r) for r in (await conn.execute(sql, params)).mappings().all()]


async def gather(engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
                 ) -> ReportData:
    """Compute every section of the report (the CLI's functions and defaults)."""
    return ReportData(
        segment, start, end,
        await fa.calibration(engine, segment, start, end),
        await ece_over_time(engine, segment, start, end),
        await fa.escalation(engine, segment, start, end, threshold=MISSED_THRESHOLD),
        await fa.thresholds(engine, segment, start, end, target=TARGET_RESIDUAL_FAILURE,
                            budget=None, candidates=THRESHOLD_GRID),
        await drift_history(engine, segment, start, end),
        await firing_alerts(engine, segment),
    )  # fmt: skip


# --- HTML --------------------------------------------------------------------------------------


def _cell(value: Any, key: str | None = None, digits: int = 4) -> str:
    if isinstance(value, bool) or value is None or not isinstance(value, int | float):
        shown = "-" if value is None else str(value)
        return f"<td>{html.escape(shown)}</td>"
    shown = str(value) if isinstance(value, int) else (
        f"{value:.{digits}f}" if value == value else "-")
    attrs = f' data-key="{html.escape(key)}" data-value="{value!r}"' if key else ""
    return f'<td class="num"{attrs}>{shown}</td>'


def _table(head: list[str], rows: list[str]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(rows) or f'<tr><td colspan="{len(head)}">none</td></tr>'
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _sections(d: ReportData) -> str:
    cal = [f"<tr><td>{html.escape(a)}</td>" + "".join(_cell(getattr(r, f), f"calibration/{a}/{f}")
           for f in ("count", "ece", "mce", "brier", "accuracy", "mean_confidence"))
           + _cell("yes" if r.meaningful else f"no ({r.reason})") + "</tr>"
           for a, r in d.calibration.items()]  # fmt: skip
    esc = [f"<tr><td>{html.escape(a)}</td><td>{b.lower:.1f}-{b.upper:.1f}</td>"
           + _cell(b.n, f"escalation/{a}/{b.index}/n")
           + _cell(b.rate, f"escalation/{a}/{b.index}/rate") + "</tr>"
           for a, s in d.escalation.items() for b in s.bins if b.n]  # fmt: skip
    thr = [f"<tr><td>{html.escape(a)}</td>" + _cell(r.threshold, f"thresholds/{a}/{i}/threshold", 2)
           + _cell(r.escalation_rate, f"thresholds/{a}/{i}/escalation_rate")
           + _cell(r.residual_failure_rate, f"thresholds/{a}/{i}/residual_failure_rate")
           + _cell("<" if rec.threshold == r.threshold else "") + "</tr>"
           for a, (tb, rec) in d.thresholds.items() for i, r in enumerate(tb.rows)]  # fmt: skip
    dr = [f"<tr><td>{html.escape(str(c['agent_id']))}</td><td>{html.escape(str(c['domain']))}</td>"
          f"<td>{c['tier'] or '-'}</td><td>{c['recent_to']:%Y-%m-%d %H:%M}</td>"
          + "".join(_cell(c[f]) for f in ("n_baseline", "n_recent", "psi", "ks_pvalue",
                                          "accuracy_pvalue", "ece_baseline", "ece_recent",
                                          "ece_pvalue"))
          + f"<td>{'FIRED: ' + html.escape(str(c['fired_tests'])) if c['fired'] else 'no'}</td>"
          "</tr>" for c in d.drift]  # fmt: skip
    al = [f"<tr><td>{a['time']:%Y-%m-%d %H:%M}</td><td>{html.escape(str(a['severity']))}</td>"
          f"<td>{html.escape(str(a['rule']))}</td><td>{html.escape(str(a['agent_id']))}</td>"
          + _cell(a["value"]) + f"<td>{html.escape(str(a['summary']))}</td></tr>"
          for a in d.alerts]  # fmt: skip
    return "".join([
        "<h2>Calibration</h2>", _table(["agent", "items", "ECE", "MCE", "Brier", "accuracy",
                                        "mean confidence", "meaningful"], cal),
        "<h2>Escalation rate by minimum-confidence bin</h2>",
        _table(["agent", "bin", "conversations", "escalation rate"], esc),
        f"<h2>Threshold what-if (target residual failure {TARGET_RESIDUAL_FAILURE})</h2>",
        _table(["agent", "threshold", "escalation rate", "residual failure rate",
                "recommended"], thr),
        "<h2>Drift checks</h2>",
        _table(["agent", "domain", "tier", "recent window end", "n baseline", "n recent", "PSI",
                "KS p", "accuracy p", "ECE baseline", "ECE recent", "ECE p", "fired"], dr),
        "<h2>Firing alerts</h2>",
        _table(["fired at", "severity", "rule", "agent", "value", "summary"], al),
    ])  # fmt: skip


_CSS = ("body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;"
        "margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.2em .6em}td.num{text-align:"
        "right;font-variant-numeric:tabular-nums}img{max-width:100%;border:1px solid #eee}")


def render_html(d: ReportData, images: dict[str, bytes]) -> str:
    """The report page: scope, the figures (base64 PNG) and the tables."""
    scope = ", ".join(f"{k}={v}" for k, v in vars(d.segment).items() if v is not None)
    figs = "".join(
        f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,'
        f'{base64.b64encode(png).decode()}"><figcaption>{html.escape(name)}</figcaption></figure>'
        for name, png in images.items())  # fmt: skip
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Agent reliability report"
            f"</title><style>{_CSS}</style></head><body><h1>Agent reliability report</h1>"
            f"<p>Scope: {html.escape(scope or 'all agents')}; range {d.start:%Y-%m-%d %H:%M} to "
            f"{d.end:%Y-%m-%d %H:%M} UTC.</p>{figs}{_sections(d)}</body></html>")


def write_report(d: ReportData, out_dir: Path) -> Path:
    """Write ``report.html`` and the PNGs into ``out_dir`` (created); returns the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = {
        "reliability.png": rp.reliability_diagram(d.calibration),
        "ece_over_time.png": rp.ece_over_time(d.ece_series),
        "escalation_by_bin.png": rp.escalation_by_bin(d.escalation),
        "threshold_curve.png": rp.threshold_curve(d.thresholds),
    }
    for name, png in images.items():
        (out_dir / name).write_bytes(png)
    path = out_dir / "report.html"
    path.write_text(render_html(d, images), encoding="utf-8")
    return path


async def build_report(engine: AsyncEngine, segment: Segment, start: datetime, end: datetime,
                       out_dir: Path) -> Path:
    """Gather and write the report; returns the path of the HTML file."""
    return write_report(await gather(engine, segment, start, end), out_dir)


def write_demo_report(database_url: str, start: datetime, end: datetime, out_dir: Path) -> Path:
    """The report of every agent over ``[start, end)`` (what ``monitor up`` writes at the end
    of its run); returns the HTML path. Synchronous: runs its own event loop."""

    async def go() -> Path:
        engine = make_engine(database_url)
        try:
            return await build_report(engine, Segment(), start, end, out_dir)
        finally:
            await engine.dispose()

    return asyncio.run(go())
