"""The report's worst conversations: for each agent to act on, the conversations the dashboards'
Examples rules pick in the report's range (:mod:`monitor.analytics.examples`), each with why,
the ``monitor conversation ID`` command and its transcript folded (redacted, as the command
prints it: :mod:`monitor.judges.transcript`).

The rule closest to the agent's reason comes first (drift for a drift reason, escalation for
an inversion or an escalation alert, judges for a judge's flag, calibration otherwise); every
rule contributes, up to :data:`PER_RULE` conversations each and :data:`PER_AGENT` in all, a
conversation picked by two rules shown once.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.examples import KINDS, Example, worst_conversations
from monitor.judges.transcript import (
    Transcript,
    gate_text,
    step_text,
    turns_of,
    verdict_text,
)
from monitor.judges.transcript_repo import load_transcript
from monitor.report.health import AgentHealth

PER_RULE = 2
PER_AGENT = 5
MAX_STEPS = 300  # transcript rows shown per conversation; the command shows them all

#: words of a health reason -> the rule that shows it, most specific first
_REASON_KINDS = (
    ("drift", "drift"),
    ("escalat", "escalation"),
    ("inver", "escalation"),
    ("fabricat", "judges"),
    ("judge", "judges"),
    ("flag", "judges"),
)


@dataclass(frozen=True)
class Shown:
    """One worst conversation of an agent: why a rule picked it, and its transcript (None when
    the conversation is no longer stored)."""

    example: Example
    transcript: Transcript | None


def rules_for(reason: str) -> tuple[str, ...]:
    """The Examples rules in the order they show ``reason`` (module docstring)."""
    lowered = reason.lower()
    first = next((kind for word, kind in _REASON_KINDS if word in lowered), "calibration")
    return (first, *(k for k in KINDS if k != first))


async def agents_examples(
    engine: AsyncEngine, found: Sequence[AgentHealth], start: datetime, end: datetime
) -> dict[str, list[Shown]]:
    """Per agent to act on (level ``act``), its worst conversations (module docstring)."""
    out: dict[str, list[Shown]] = {}
    for health in found:
        if health.level != "act":
            continue
        picked: dict[str, Example] = {}
        for kind in rules_for(health.reason):
            for ex in await worst_conversations(engine, kind, start, end, health.agent, PER_RULE):
                picked.setdefault(ex.conversation_id, ex)
        shown = list(picked.values())[:PER_AGENT]
        out[health.agent] = [
            Shown(ex, await load_transcript(engine, ex.conversation_id)) for ex in shown
        ]
    return out


def _pre(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


def transcript_html(tr: Transcript) -> str:
    """The transcript as tables: its events (the first :data:`MAX_STEPS`), its verdicts, its
    gate decisions, then its sampling decision."""
    r = tr.rollup
    outcome = (
        "not known yet"
        if r.get("outcome_success") is None
        else f"{'succeeded' if r['outcome_success'] else 'failed'} ({r.get('outcome_source')})"
    )
    escalated = (
        f"escalated at turn {r.get('escalation_turn')} ({r.get('escalation_trigger')})"
        if r.get("escalated")
        else "not escalated"
    )
    head = (
        f"<p class='meta'>{html.escape(str(r.get('agent_id')))}; {r.get('event_count')} events "
        f"from {r['first_ts']:%Y-%m-%d %H:%M:%S} UTC; outcome {html.escape(outcome)}; "
        f"{html.escape(escalated)}</p>"
    )
    for note in tr.notes:
        head += f"<p class='meta'>note: {html.escape(note)}</p>"
    rows = []
    for s in tr.steps[:MAX_STEPS]:
        who, what = step_text(s)
        turn = "-" if s.turn is None else str(s.turn)
        rows.append(
            f"<tr><td>{s.at:%H:%M:%S}</td><td>{turn}</td><td>{html.escape(who)}</td>"
            f"<td>{_pre(what)}</td></tr>"
        )
    if len(tr.steps) > MAX_STEPS:
        rows.append(
            f"<tr><td colspan='4'>{len(tr.steps) - MAX_STEPS} more events: "
            f"<code>monitor conversation {html.escape(tr.conversation_id)}</code></td></tr>"
        )
    out = head + _table(["time", "turn", "who", "what"], rows)
    turns = turns_of(tr)
    if tr.verdicts:
        verdicts = [
            f"<tr><td>{html.escape(v.judge)} {html.escape(v.judge_version)}</td>"
            f"<td>{'conversation' if v.item_id is None else f'turn {v.turn}'}</td>"
            f"<td>{_pre(verdict_text(v, turns))}</td></tr>"
            for v in tr.verdicts
        ]
        out += "<h4>Verdicts</h4>" + _table(["judge", "on", "said"], verdicts)
    if tr.gate:
        gates = [f"<tr><td>{s.at:%H:%M:%S}</td><td>{_pre(gate_text(s))}</td></tr>" for s in tr.gate]
        out += "<h4>Gate decisions</h4>" + _table(["time", "decision"], gates)
    return out + f"<p class='meta'>Sample: {html.escape(tr.sample.describe())}</p>"


def _table(head: list[str], rows: list[str]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (
        f'<div class="scroll"><table><thead><tr>{th}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def examples_html(shown: Sequence[Shown]) -> str:
    """An agent's worst conversations: one line each (rule, id, why, the command), the
    transcript folded under it."""
    if not shown:
        return "<p class='meta'>Worst conversations: none picked in this range.</p>"
    items = []
    for s in shown:
        ex, cid = s.example, html.escape(s.example.conversation_id)
        body = (
            transcript_html(s.transcript)
            if s.transcript is not None
            else "<p class='meta'>Its events are no longer stored.</p>"
        )
        items.append(
            f"<details class='example'><summary>{html.escape(ex.kind)}: <code>{cid}</code> "
            f"({ex.at:%Y-%m-%d %H:%M}): {html.escape(ex.why)}</summary>"
            f"<p><code>monitor conversation {cid}</code></p>{body}</details>"
        )
    return "<h4>Worst conversations</h4>" + "".join(items)


def agent_examples_html(examples: Mapping[str, Sequence[Shown]], agent: str) -> str:
    """The block of ``agent``'s worst conversations ('' for an agent not to act on)."""
    return examples_html(examples[agent]) if agent in examples else ""
