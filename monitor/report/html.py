"""The report page, ordered for a person with two minutes (see :func:`render_html`).

Every numeric table cell carries its exact value in ``data-key`` / ``data-value`` (the text shows
it rounded); images are embedded as base64 PNG so the file opens anywhere on its own. The page
reads on a phone too: cards and charts reflow, wide tables scroll inside their own box.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from monitor.analytics.calibration import Proportion
from monitor.gate.effect import Effect
from monitor.report.examples import Shown, agent_examples_html
from monitor.report.health import AgentHealth

if TYPE_CHECKING:
    from monitor.report.data import ReportData

TARGET_RESIDUAL_FAILURE = 0.1
CHART_TITLES = {
    "reliability": "Reliability diagram",
    "ece_over_time": "ECE over time",
    "escalation_by_bin": "Escalation by confidence",
    "threshold_curve": "Threshold curve",
}

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1400px;
 padding:1.2em;color:#1f2328;line-height:1.4}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin:1.6em 0 .5em}
h3{font-size:1.05em;margin:1.2em 0 .4em}.meta{color:#57606a;margin:0 0 1em}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:.7em}
.card{border:1px solid #d0d7de;border-left:6px solid #999;border-radius:6px;padding:.6em .8em}
.card.act{border-left-color:#cf222e;background:#fff5f5}
.card.watch{border-left-color:#bf8700;background:#fffbea}
.card.healthy{border-left-color:#1a7f37;background:#f3fbf5}
.card .agent{font-weight:600;word-break:break-all}.card p{margin:.3em 0 0}
.badge{display:inline-block;font-size:.75em;font-weight:700;letter-spacing:.05em;
 padding:.1em .5em;border-radius:4px;color:#fff;margin-right:.4em;vertical-align:middle}
.badge.act{background:#cf222e}.badge.watch{background:#9a6700}.badge.healthy{background:#1a7f37}
.summary{font-size:1.05em;margin:.2em 0 .8em}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.92em}
td,th{border:1px solid #d0d7de;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,300px),1fr));gap:.8em}
figure{margin:0}img{width:100%;height:auto;border:1px solid #eaeef2}
figcaption{font-size:.85em;color:#57606a}
details{border:1px solid #d0d7de;border-radius:6px;padding:.4em .8em;margin:.5em 0}
summary{cursor:pointer;font-weight:600}
details.example summary{font-weight:400}h4{font-size:.95em;margin:.8em 0 .3em}
code{font-size:.9em;background:#f6f8fa;padding:0 .2em;border-radius:3px}
"""


def cell(value: Any, key: str | None = None, digits: int = 4) -> str:
    """A table cell: numbers right-aligned and rounded, with the exact value under ``key``."""
    if isinstance(value, bool) or value is None or not isinstance(value, int | float):
        shown = "-" if value is None else str(value)
        return f"<td>{html.escape(shown)}</td>"
    shown = (
        str(value) if isinstance(value, int) else (f"{value:.{digits}f}" if value == value else "-")
    )
    attrs = f' data-key="{html.escape(key)}" data-value="{value!r}"' if key else ""
    return f'<td class="num"{attrs}>{shown}</td>'


def table(head: list[str], rows: list[str], empty: str = "none") -> str:
    """A table in a horizontally scrolling box (narrow screens)."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(rows) or f'<tr><td colspan="{len(head)}">{html.escape(empty)}</td></tr>'
    return (
        f'<div class="scroll"><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody>'
        "</table></div>"
    )


def anchor(agent: str) -> str:
    return "agent-" + "".join(ch if ch.isalnum() else "-" for ch in agent)


def _badge(level: str) -> str:
    return f'<span class="badge {level}">{level.upper()}</span>'


def health_cards(found: Sequence[AgentHealth]) -> str:
    """The first screen: how many agents need action, then one card per agent."""
    if not found:
        return '<p class="summary">No agent has data in this range and scope.</p>'
    counts = {lvl: sum(v.level == lvl for v in found) for lvl in ("act", "watch", "healthy")}
    line = ", ".join(f"{n} {lvl}" for lvl, n in counts.items() if n)
    needs = [v.agent for v in found if v.level == "act"]
    head = (
        f"<b>Act on {html.escape(', '.join(needs))}</b>"
        if needs
        else "<b>No agent needs action now</b>"
    )
    cards = "".join(
        f'<div class="card {v.level}">{_badge(v.level)}<a class="agent" href="#{anchor(v.agent)}">'
        f"{html.escape(v.agent)}</a><p>{html.escape(v.reason)}</p></div>"
        for v in found
    )
    return f'<p class="summary">{head} ({line}).</p><div class="cards">{cards}</div>'


def alert_numbers(a: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """``(estimate, bound)`` of a firing alert row (:func:`monitor.report.write.firing_alerts`):
    for a rule on a bound, the point estimate and the bound it compared; for any other rule,
    the value it compared and no bound."""
    if a.get("estimate") is not None:
        return a["estimate"], a["value"]
    return a.get("value"), None


def _alert_cell(value: float | None, key: str, form: str = ".4g") -> str:
    """A number as the alert's summary writes it (``{value}``/``{estimate}``: 4 significant
    digits; ``{threshold}``: ``g``), exact under ``key``."""
    if value is None:
        return "<td>-</td>"
    return (
        f'<td class="num" data-key="{html.escape(key)}" data-value="{value!r}">{value:{form}}</td>'
    )


ALERT_HEAD = [
    "fired at",
    "severity",
    "rule",
    "agent",
    "estimate",
    "99% bound",
    "threshold",
    "items",
    "as of",
    "summary",
]


def alerts_table(alerts: Sequence[Mapping[str, Any]]) -> str:
    """The firing alerts: each one's estimate, the bound its rule compared (rules on a bound),
    the threshold and the summary, all from the same notification (``as of`` its time); the
    exact numbers under ``alerts/<fingerprint>/<column>``."""
    rows = []
    for a in alerts:
        estimate, bound = alert_numbers(a)
        k = f"alerts/{a['fingerprint']}"
        notified = a.get("notified_at")
        rows.append(
            f"<tr><td>{a['time']:%Y-%m-%d %H:%M}</td><td>{html.escape(str(a['severity']))}</td>"
            f"<td>{html.escape(str(a['rule']))}</td><td>{html.escape(str(a['agent_id']))}</td>"
            + _alert_cell(estimate, f"{k}/estimate")
            + _alert_cell(bound, f"{k}/bound")
            + _alert_cell(a.get("threshold"), f"{k}/threshold", "g")
            + _alert_cell(a.get("samples"), f"{k}/samples", "g")
            + f"<td>{'-' if notified is None else f'{notified:%Y-%m-%d %H:%M}'}</td>"
            + f"<td>{html.escape(str(a['summary'] or 'not notified yet (silenced or flapping)'))}"
            "</td></tr>"
        )
    return table(ALERT_HEAD, rows, empty="no alert is firing")


def incidents_table(incidents: Sequence[Mapping[str, Any]]) -> str:
    """The incidents: an agent's alerts that paged once, with their alerts and pages."""
    rows = [
        f"<tr><td>{html.escape(str(i['id']))}</td><td>{html.escape(str(i['key']))}</td>"
        f"<td>{html.escape(str(i['status']))}</td><td>{html.escape(str(i['severity']))}</td>"
        f"<td>{i['opened_at']:%Y-%m-%d %H:%M}</td>"
        f"<td>{'-' if i['resolved_at'] is None else format(i['resolved_at'], '%Y-%m-%d %H:%M')}"
        f"</td><td>{html.escape(', '.join(i['alerts']))} ({i['firing']} firing)</td>"
        f"<td>{i['pages']} (+{i['updates']} updates)</td></tr>"
        for i in incidents
    ]
    return table(
        ["incident", "key", "status", "severity", "opened", "resolved", "alerts", "pages"],
        rows,
        empty="no incident in the range",
    )


def _rate_cells(r: Proportion, key: str) -> str:
    """The rate and its 95 % interval as two cells (``-`` without data)."""
    interval = "-" if r.low is None or r.high is None else f"{r.low:.3f}-{r.high:.3f}"
    return cell(r.value, key) + f"<td>{interval} ({r.k}/{r.n})</td>"


GATE_HEAD = [
    "agent",
    "domain",
    "conversations",
    "proceed",
    "revise",
    "escalate",
    "escalation rate (human cost)",
    "95% interval",
    "failures prevented",
    "95% interval",
    "failure rate proceeded",
    "failure rate all",
]


def _gate_row(e: Effect, k: str, ungated: bool) -> str:
    d = e.decisions
    row = (
        f"<tr><td>{html.escape(e.agent_id)}</td><td>{html.escape(e.domain or '-')}</td>"
        + cell(e.conversations, f"{k}/conversations")
        + "".join(cell(d[x], f"{k}/decisions/{x}") for x in ("proceed", "revise", "escalate"))
        + _rate_cells(e.escalation_rate, f"{k}/escalation_rate")
        + _rate_cells(e.failures_prevented, f"{k}/failures_prevented")
        + cell(e.failure_rate_proceeded.value, f"{k}/failure_rate_proceeded")
        + cell(e.failure_rate_all.value, f"{k}/failure_rate_all")
    )
    if ungated:
        row += cell(
            None if e.failure_rate_ungated is None else e.failure_rate_ungated.value,
            f"{k}/failure_rate_ungated",
        ) + cell(e.revise_failure_rate.value, f"{k}/revise_failure_rate")
    return row + "</tr>"


def gate_section(effects: Sequence[Effect]) -> str:
    """The runtime trust gate per agent x domain (``monitor gate --json --no-replay``):
    enforced decisions (source ``recorded``, keys ``gate/AGENT/DOMAIN/...``), then shadow
    decisions apart (source ``shadow``, keys ``gate-shadow/AGENT/DOMAIN/...``); empty when no
    agent asked the gate in the range."""
    if not effects:
        return ""
    enforced = [e for e in effects if e.source != "shadow"]
    shadow = [e for e in effects if e.source == "shadow"]
    out = (
        "<h2>Runtime trust gate</h2><p class='meta'>Each gated conversation's latest decision "
        "in the range. Failures prevented: failures among the conversations the gate stopped "
        "(revise or escalate) / all failures; the escalation rate is what it costs in human "
        "hand-overs. For an agent that obeys the gate, stopped conversations' outcomes are the "
        "revised answer's or the human's. Failure rate ungated: the same agent's conversations "
        "in the domain without any gate decision, when it has some (docs/gate.md).</p>"
        + table(
            [*GATE_HEAD, "failure rate ungated", "revise failure rate"],
            [_gate_row(e, f"gate/{e.agent_id}/{e.domain}", True) for e in enforced],
            "no enforced decision in the range",
        )
    )
    if shadow:
        out += (
            "<h3>Shadow decisions (not enforced)</h3><p class='meta'>Decisions of policy rules "
            "in shadow mode: recorded, but the agent was answered proceed and sent its own "
            "answer, so the outcomes are unbiased. Escalation rate: what enforcing would cost "
            "in human hand-overs; failures prevented: the share of failures enforcing would "
            "have stopped (docs/gate.md, shadow mode).</p>"
            + table(
                GATE_HEAD,
                [_gate_row(e, f"gate-shadow/{e.agent_id}/{e.domain}", False) for e in shadow],
            )
        )
    return out


def _figure(name: str, png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode()
    return (
        f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(caption)} ({html.escape(name)})</figcaption></figure>"
    )


def agent_charts(
    found: Sequence[AgentHealth],
    images: Mapping[str, Mapping[str, bytes]],
    examples: Mapping[str, Sequence[Shown]] | None = None,
) -> str:
    """One block per agent (health order): its badge, its worst conversations when it is to
    act on (``examples``), and its charts."""
    out = []
    for v in found:
        charts = images.get(v.agent, {})
        figs = "".join(
            _figure(f"{v.agent}-{kind}.png", png, CHART_TITLES.get(kind, kind))
            for kind, png in charts.items()
        )
        out.append(
            f'<h3 id="{anchor(v.agent)}">{_badge(v.level)}{html.escape(v.agent)}</h3>'
            + agent_examples_html(examples or {}, v.agent)
            + f'<div class="charts">{figs}</div>'
        )
    return "".join(out)


def full_tables(d: ReportData, combined: Mapping[str, bytes]) -> str:
    """Every number, folded: calibration, escalation, thresholds, drift, all-agent charts."""
    cal = [
        f"<tr><td>{html.escape(a)}</td>"
        + "".join(
            cell(getattr(r, f), f"calibration/{a}/{f}")
            for f in ("count", "ece", "mce", "brier", "accuracy", "mean_confidence")
        )
        + cell("yes" if r.meaningful else f"no ({r.reason})")
        + "</tr>"
        for a, r in d.calibration.items()
    ]
    esc = [
        f"<tr><td>{html.escape(a)}</td><td>{b.lower:.1f}-{b.upper:.1f}</td>"
        + cell(b.n, f"escalation/{a}/{b.index}/n")
        + cell(b.rate, f"escalation/{a}/{b.index}/rate")
        + "</tr>"
        for a, s in d.escalation.items()
        for b in s.bins
        if b.n
    ]
    thr = [
        f"<tr><td>{html.escape(a)}</td>"
        + cell(r.threshold, f"thresholds/{a}/{i}/threshold", 2)
        + cell(r.escalation_rate, f"thresholds/{a}/{i}/escalation_rate")
        + cell(r.residual_failure_rate, f"thresholds/{a}/{i}/residual_failure_rate")
        + cell("<" if rec.threshold == r.threshold else "")
        + "</tr>"
        for a, (tb, rec) in d.thresholds.items()
        for i, r in enumerate(tb.rows)
    ]
    dr = [
        f"<tr><td>{html.escape(str(c['agent_id']))}</td><td>{html.escape(str(c['domain']))}</td>"
        f"<td>{c['tier'] or '-'}</td><td>{c['recent_to']:%Y-%m-%d %H:%M}</td>"
        + "".join(
            cell(c[f])
            for f in (
                "n_baseline",
                "n_recent",
                "psi",
                "ks_pvalue",
                "accuracy_pvalue",
                "ece_baseline",
                "ece_recent",
                "ece_pvalue",
            )
        )
        + f"<td>{'FIRED: ' + html.escape(str(c['fired_tests'])) if c['fired'] else 'no'}</td>"
        "</tr>"
        for c in d.drift
    ]
    fired = sum(1 for c in d.drift if c["fired"])
    figs = "".join(
        _figure(f"{k}.png", png, CHART_TITLES.get(k, k) + ", all agents")
        for k, png in combined.items()
    )

    def fold(title: str, body: str) -> str:
        return f"<details><summary>{html.escape(title)}</summary>{body}</details>"

    return "".join(
        [
            fold(
                f"Calibration ({len(cal)} rows)",
                table(
                    [
                        "agent",
                        "items",
                        "ECE",
                        "MCE",
                        "Brier",
                        "accuracy",
                        "mean confidence",
                        "meaningful",
                    ],
                    cal,
                ),
            ),
            fold(
                f"Escalation rate by minimum-confidence bin ({len(esc)} rows)",
                table(["agent", "bin", "conversations", "escalation rate"], esc),
            ),
            fold(
                f"Threshold what-if, target residual failure {TARGET_RESIDUAL_FAILURE} "
                f"({len(thr)} rows)",
                table(
                    [
                        "agent",
                        "threshold",
                        "escalation rate",
                        "residual failure rate",
                        "recommended",
                    ],
                    thr,
                ),
            ),
            fold(
                f"Drift checks ({len(dr)} rows, {fired} fired)",
                table(
                    [
                        "agent",
                        "domain",
                        "tier",
                        "recent window end",
                        "n baseline",
                        "n recent",
                        "PSI",
                        "KS p",
                        "accuracy p",
                        "ECE baseline",
                        "ECE recent",
                        "ECE p",
                        "fired",
                    ],
                    dr,
                ),
            ),
            fold("All agents on one chart", f'<div class="charts">{figs}</div>'),
        ]
    )


def render_html(
    d: ReportData,
    found: Sequence[AgentHealth],
    images: Mapping[str, Mapping[str, bytes]],
    combined: Mapping[str, bytes],
) -> str:
    """The page: the health level per agent, the firing alerts and the incidents they belong to,
    the runtime trust gate (only when an agent asked it), the charts per agent (an agent to act
    on with its worst conversations first, transcripts folded), then the full tables folded.
    ``images`` are the
    per-agent charts (agent -> kind -> PNG), ``combined`` the all-agent ones (kind -> PNG)."""
    scope = ", ".join(f"{k}={v}" for k, v in vars(d.segment).items() if v is not None)
    return "".join(
        [
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f"<title>Agent reliability report</title><style>{_CSS}</style></head><body>",
            "<h1>Agent reliability report</h1>",
            f"<p class='meta'>Scope: {html.escape(scope or 'all agents')}; "
            f"{d.start:%Y-%m-%d %H:%M} to {d.end:%Y-%m-%d %H:%M} UTC"
            f"{'; ' + html.escape(d.source.describe()) if d.source.standby else ''}.</p>",
            "<h2>Health per agent</h2>",
            health_cards(found),
            f"<h2>Firing alerts ({len(d.alerts)})</h2>",
            alerts_table(d.alerts),
            f"<h2>Incidents ({sum(1 for i in d.incidents if i['status'] == 'open')} open)</h2>",
            incidents_table(d.incidents),
            gate_section(d.gate),
            "<h2>Charts per agent</h2>",
            agent_charts(found, images, d.examples),
            "<h2>Full tables</h2>",
            full_tables(d, combined),
            "</body></html>",
        ]
    )
