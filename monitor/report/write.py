"""``monitor report``: a self-contained HTML report (and PNGs) for a time range and scope.

Every number comes from the functions the CLI uses (:mod:`monitor.analytics.reports` with the
CLI's defaults), so the report's tables equal ``monitor calibration|escalation|thresholds
--json`` for the same scope and range; the gate section equals ``monitor gate --json
--no-replay`` (recorded decisions only: an agent that never asked the gate gets no gate
row). Each agent to act on lists its worst conversations by the dashboards' Examples rules,
transcripts folded and redacted (:mod:`monitor.report.examples`). Each numeric cell carries
its exact value in ``data-key`` / ``data-value`` attributes (the text shows it rounded); the
PNGs are written next to the HTML and embedded in it as base64, so the HTML opens anywhere on
its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.alerts.incidents import Incident
from monitor.analytics import reports as fa
from monitor.analytics.bins import BinSums, sum_all
from monitor.analytics.calibration import ece
from monitor.analytics.repo import Segment, bin_series
from monitor.analytics.reports import ALL
from monitor.analytics.write import drift_history
from monitor.gate.effect import Effect, effectiveness
from monitor.gate.effect_repo import gated_conversations, ungated_counts
from monitor.gate.policy import DEFAULT_POLICY
from monitor.report import plots as rp
from monitor.report.data import ReportData
from monitor.report.examples import agents_examples
from monitor.report.health import AgentHealth, agents_health
from monitor.report.html import TARGET_RESIDUAL_FAILURE, anchor, render_html
from monitor.store.engine import make_engine
from monitor.store.replica import read_source

#: CLI defaults the report reproduces (``monitor escalation`` / ``monitor thresholds``).
MISSED_THRESHOLD = 0.5
MIN_POINT_ITEMS = 10  # fewest items behind one point of "ECE over time"
THRESHOLD_GRID = [round(i / 10, 6) for i in range(11)]


def bucket_for(start: datetime, end: datetime) -> tuple[str, timedelta]:
    """``(stored resolution, bucket length)`` for about 30 points over ``[start, end)``."""
    span = end - start
    res, unit = (
        ("1h", timedelta(hours=1)) if span > timedelta(days=2) else ("1m", timedelta(minutes=1))
    )
    return res, max(unit, (span / 30 // unit) * unit)


async def ece_over_time(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> dict[str, list[tuple[datetime, float]]]:
    """Per agent, ``(bucket start, ECE)`` from the bins summed per bucket (exact roll-up).

    The buckets divide the span the data covers, not the whole range: 17 minutes of traffic in
    a 24-hour range get about 30 one-minute points, not 3 of 48 minutes each."""
    res, step = bucket_for(start, end)
    series = await bin_series(engine, segment, start, end, res)
    if series:
        first = min(window for _, window in series)
        last = max(window for _, window in series)
        res_unit = timedelta(hours=1) if res == "1h" else timedelta(minutes=1)
        start, step = first, bucket_for(first, last + res_unit)[1]
    grouped: dict[tuple[str, datetime], list[BinSums]] = {}
    for (agent, window), sums in series.items():
        bucket = start + ((window - start) // step) * step
        grouped.setdefault((agent, bucket), []).append(sums)
    out: dict[str, list[tuple[datetime, float]]] = {}
    for (agent, bucket), parts in sorted(grouped.items()):
        total = sum_all(parts)  # a bucket of a few items is noise (ECE biased high), skipped
        if float(total.weight.sum()) > 0 and int(total.count.sum()) >= MIN_POINT_ITEMS:
            out.setdefault(agent, []).append((bucket, ece(total)))
    return out


#: each firing alert with the numbers of the notification its summary was rendered from (the
#: latest firing or repeat of the episode: an ack's or an earlier episode's row is not it)
_FIRING = """
SELECT (s.state->>'fired_at')::timestamptz AS time, s.fingerprint, s.rule,
  s.scope->>'agent' AS agent_id, s.scope->>'domain' AS domain,
  (s.scope->>'tier')::smallint AS tier,
  coalesce(n.severity, k.severity) AS severity, n.summary, n.value, n.estimate, n.threshold,
  n.samples, n.at AS notified_at
FROM alert_states s
LEFT JOIN LATERAL (SELECT severity, summary, value, estimate, threshold, samples, at
  FROM alert_history a
  WHERE a.fingerprint = s.fingerprint AND a.kind IN ('firing', 'repeat')
    AND a.at >= (s.state->>'fired_at')::timestamptz
  ORDER BY a.at DESC, a.id DESC LIMIT 1) n ON TRUE
LEFT JOIN LATERAL (SELECT severity FROM alert_history a WHERE a.fingerprint = s.fingerprint
  ORDER BY a.at DESC, a.id DESC LIMIT 1) k ON TRUE
WHERE s.status = 'firing'"""


async def firing_alerts(engine: AsyncEngine, segment: Segment) -> list[dict[str, Any]]:
    """Firing alerts of the agents matched by ``segment`` (and those of no agent), newest
    first, each with the numbers of the notification its ``summary`` says: ``value`` (what the
    rule compared: the bound, for a rule on one), ``estimate`` (the point estimate behind a
    bound, else None), ``threshold``, ``samples``, ``notified_at``. An alert not notified in
    its episode yet (held by a silence or as flapping) has None there."""
    cond, params = Segment(segment.agent).where()
    sql = text(f"SELECT * FROM ({_FIRING}) f WHERE agent_id IS NULL OR ({cond}) ORDER BY time DESC")
    async with engine.connect() as conn:
        return [dict(r) for r in (await conn.execute(sql, params)).mappings().all()]


async def incidents(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """The alert incidents (``alert_incidents``) of the agents matched by ``segment`` that were
    open at some time in ``[start, end)``, open ones first, then the newest: id, key, status,
    severity, opened and resolved at, the member alerts' rules, how many still fire, pages and
    updates."""
    cond, params = Segment(segment.agent).where("i.")
    sql = text(
        "SELECT i.state FROM (SELECT state, status, opened_at, resolved_at,"
        " labels->>'agent' AS agent_id FROM alert_incidents) i"
        f" WHERE ({cond}) AND i.opened_at < :end"
        " AND (i.resolved_at IS NULL OR i.resolved_at >= :start)"
        " ORDER BY i.status = 'open' DESC, i.opened_at DESC"
    )
    async with engine.connect() as conn:
        result = await conn.execute(sql, {**params, "start": start, "end": end})
        states: list[Any] = list(result.scalars().all())
    found = [Incident.from_dict(s) for s in states]
    return [
        {
            "id": i.id,
            "key": i.key,
            "status": i.status,
            "severity": i.severity,
            "opened_at": i.opened_at,
            "resolved_at": i.resolved_at,
            "alerts": [m.rule for m in i.members],
            "firing": len(i.firing),
            "pages": i.pages,
            "updates": i.updates,
        }
        for i in found
    ]


async def gate_effects(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> list[Effect]:
    """``monitor gate --json --no-replay`` for the scope: each gated conversation's latest
    decision in the range (the policy only matters for replayed decisions, not read here).
    The scope's agent (wildcards too) and domain apply; its version and tier do not (gate
    effectiveness is kept per agent x domain). With the ungated baseline, as the CLI."""
    pattern = segment.agent
    exact = pattern if pattern is not None and not any(c in pattern for c in "*?[") else None
    rows = await gated_conversations(engine, DEFAULT_POLICY, start, end, exact, replay=False)
    if pattern is not None and exact is None:
        rows = [r for r in rows if fnmatch.fnmatchcase(r.agent_id, pattern)]
    if segment.domain is not None:
        rows = [r for r in rows if r.domain == segment.domain]
    return effectiveness(rows, await ungated_counts(engine, start, end, exact))


async def gather(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> ReportData:
    """Compute every section of the report (the CLI's functions and defaults), which server
    they were read from (a replica's lag is shown under the title), and the worst
    conversations of each agent to act on."""
    source = await read_source(engine)
    data = ReportData(
        segment,
        start,
        end,
        await fa.calibration(engine, segment, start, end),
        await ece_over_time(engine, segment, start, end),
        await fa.escalation(engine, segment, start, end, threshold=MISSED_THRESHOLD),
        await fa.thresholds(
            engine,
            segment,
            start,
            end,
            target=TARGET_RESIDUAL_FAILURE,
            budget=None,
            candidates=THRESHOLD_GRID,
        ),
        await drift_history(engine, segment, start, end),
        await firing_alerts(engine, segment),
        await gate_effects(engine, segment, start, end),
        source,
        incidents=await incidents(engine, segment, start, end),
    )
    examples = await agents_examples(engine, report_health(data), start, end)
    return dataclasses.replace(data, examples=examples)


# --- files -------------------------------------------------------------------------------------


def report_health(d: ReportData) -> list[AgentHealth]:
    """The health level per agent (monitor.report.health) from the report's data."""
    inverted = {a: s.inversion.inverted for a, s in d.escalation.items() if a != ALL}
    return agents_health(d.calibration, inverted, d.drift, d.alerts)


def _charts(d: ReportData, agents: list[str]) -> dict[str, dict[str, bytes]]:
    def one(source: dict[str, Any], agent: str) -> dict[str, Any]:
        return {agent: source[agent]} if agent in source else {}

    return {
        agent: {
            "reliability": rp.reliability_diagram(one(d.calibration, agent)),
            "ece_over_time": rp.ece_over_time(one(d.ece_series, agent), compact=True),
            "escalation_by_bin": rp.escalation_by_bin(one(d.escalation, agent), compact=True),
            "threshold_curve": rp.threshold_curve(one(d.thresholds, agent), compact=True),
        }
        for agent in agents
    }


def write_report(d: ReportData, out_dir: Path) -> Path:
    """Write ``report.html`` and the PNGs (per agent ``<agent>-<chart>.png``, all agents
    ``<chart>.png``) into ``out_dir`` (created); returns the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    found = report_health(d)
    combined = {
        "reliability": rp.reliability_diagram(d.calibration),
        "ece_over_time": rp.ece_over_time(d.ece_series),
        "escalation_by_bin": rp.escalation_by_bin(d.escalation),
        "threshold_curve": rp.threshold_curve(d.thresholds),
    }
    per_agent = _charts(d, [v.agent for v in found])
    for kind, png in combined.items():
        (out_dir / f"{kind}.png").write_bytes(png)
    for agent, charts in per_agent.items():
        for kind, png in charts.items():
            (out_dir / f"{anchor(agent)}-{kind}.png").write_bytes(png)
    path = out_dir / "report.html"
    path.write_text(render_html(d, found, per_agent, combined), encoding="utf-8")
    return path


async def build_report(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime, out_dir: Path
) -> Path:
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
