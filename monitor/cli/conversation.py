"""``monitor conversation ID``: one conversation, redacted, as a person reads it.

First its roll-up (agent, segment, when, outcome), then its events in order (messages with role
and confidence and the tool calls they make, tool results with ok and error, the escalation
with its trigger and turn, the outcome with its source and when it arrived, feedback), then the
judges' verdicts with their evidence, the gate's decisions and the sampling decision. Secrets,
card numbers, emails and phone numbers are redacted in the text and in ``--json``
(:mod:`monitor.judges.transcript`). Laid out for 100 columns (a terminal's own width when
wider).

Exit codes: 0 shown, 2 an unknown conversation id, bad options or no database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from monitor.cli import analytics_common as ac
from monitor.judges.transcript import Step, Transcript, VerdictView
from monitor.judges.transcript_repo import load_transcript

WIDTH = 100  # the layout's width when the output is not a terminal (or a narrower one)
CONTENT_CHARS = 2000  # longest text shown per cell; --json has everything


def console() -> Console:
    """A terminal's console when at least :data:`WIDTH` wide, else one of :data:`WIDTH`."""
    c = Console(highlight=False)
    return c if c.is_terminal and c.width >= WIDTH else Console(width=WIDTH, highlight=False)


def _t(at: datetime | None) -> str:
    return "-" if at is None else f"{at:%Y-%m-%d %H:%M:%S}"


def _num(x: Any, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _cut(text: str, most: int = CONTENT_CHARS) -> str:
    return text if len(text) <= most else text[:most] + f" ... ({len(text) - most} more chars)"


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def step_lines(step: Step) -> tuple[str, str]:
    """``(who, what)`` of one step: who acted (with confidence or ok) and what was said or done
    (rich markup, escaped)."""
    d: Mapping[str, Any] = step.detail
    if step.kind == "message":
        who = str(d.get("role", "?"))
        if d.get("confidence") is not None:
            who += f" {_num(d['confidence'])}"
        text = str(d.get("content") or "").strip()
        parts = [escape(_cut(text))] if text else []
        for call in d.get("tool_calls", []):
            args = _compact(call.get("arguments", {}))
            parts.append(f"[cyan]-> {escape(str(call.get('name')))}[/]({escape(_cut(args, 400))})")
        return who, "\n".join(parts) or "[dim](no text)[/]"
    if step.kind == "tool_result":
        ok = bool(d.get("ok"))
        who = f"tool {'ok' if ok else '[red]FAILED[/]'}"
        what = f"[cyan]{escape(str(d.get('name')))}[/]"
        if d.get("error"):
            what += f" [red]error: {escape(_cut(str(d['error']), 400))}[/]"
        content = str(d.get("content") or "").strip()
        if content and content != str(d.get("error") or "").strip():
            what += f"\n{escape(_cut(content))}"
        return who, what
    if step.kind == "escalation":
        what = f"[bold]escalated[/] (trigger {escape(str(d.get('trigger')))}"
        what += f", turn {step.turn})" if step.turn is not None else ")"
        if d.get("confidence") is not None:
            what += f" at confidence {_num(d['confidence'])}"
        if d.get("reason"):
            what += f": {escape(_cut(str(d['reason']), 400))}"
        return "escalation", what
    if step.kind == "outcome":
        ok = bool(d.get("success"))
        what = f"[{'green' if ok else 'red'}]{'succeeded' if ok else 'failed'}[/]"
        what += f", source {escape(str(d.get('source')))}"
        if d.get("reward") is not None:
            what += f", reward {_num(d['reward'])}"
        what += f"; arrived {_t(step.arrived)}"
        return "outcome", what
    if step.kind == "feedback":
        what = f"score {_num(d.get('score'))} from {escape(str(d.get('source')))}"
        if d.get("comment"):
            what += f": {escape(_cut(str(d['comment']), 400))}"
        return "feedback", what
    return step.kind, escape(_cut(_compact(dict(d)), 400))


def _header(c: Console, tr: Transcript) -> None:
    r = tr.rollup
    c.print(f"[bold]Conversation {escape(tr.conversation_id)}[/]")
    agent = escape(str(r["agent_id"]))
    extra = ", ".join(
        f"{k} {escape(str(r[c_]))}"
        for k, c_ in (("version", "agent_version"), ("model", "agent_model"))
        if r.get(c_)
    )
    c.print(f"agent {agent}" + (f" ({extra})" if extra else ""))
    seg = [
        f"{k} {escape(str(r[k]))}"
        for k in ("domain", "tier", "channel", "intent", "segment", "task_id", "trial")
        if r.get(k) is not None
    ]
    if seg:
        c.print(", ".join(seg))
    span = f"from {_t(r.get('first_ts'))} to {_t(r.get('last_ts'))} UTC"
    c.print(f"{r.get('event_count')} events {span}")
    if r.get("outcome_success") is None:
        outcome = "outcome: not known yet"
    else:
        outcome = (
            f"outcome: {'succeeded' if r['outcome_success'] else '[red]failed[/]'} "
            f"({escape(str(r.get('outcome_source')))}, at {_t(r.get('outcome_at'))})"
        )
    esc = (
        f"escalated at turn {r.get('escalation_turn')} ({escape(str(r.get('escalation_trigger')))})"
        if r.get("escalated")
        else "not escalated"
    )
    conf = f"confidence min {_num(r.get('min_confidence'))}, last {_num(r.get('last_confidence'))}"
    c.print(f"{outcome}; {esc}; {conf}")
    for note in tr.notes:
        c.print(f"[yellow]note:[/] {escape(note)}")


def _transcript(c: Console, tr: Transcript) -> None:
    t = Table(title=f"Events ({len(tr.steps)})", title_justify="left", expand=True)
    t.add_column("time", no_wrap=True)
    t.add_column("turn", justify="right", no_wrap=True)
    t.add_column("who", no_wrap=True)
    t.add_column("what", ratio=1, overflow="fold")
    for s in tr.steps:
        who, what = step_lines(s)
        t.add_row(f"{s.at:%H:%M:%S}", "-" if s.turn is None else str(s.turn), who, what)
    c.print(t)


def by_turn(value: Any, turns: Mapping[str, int | None]) -> Any:
    """``value`` with every string that is an event id of the conversation shown as
    ``turn N`` (evidence cites events by id; a person reads turns)."""
    if isinstance(value, str):
        turn = turns.get(value, -1)
        return value if turn == -1 else f"turn {turn}" if turn is not None else "(no turn)"
    if isinstance(value, Mapping):
        return {k: by_turn(v, turns) for k, v in value.items()}
    if isinstance(value, list):
        return [by_turn(v, turns) for v in value]
    return value


def verdict_text(v: VerdictView, turns: Mapping[str, int | None]) -> str:
    """The verdict's finding, rationale, error and evidence (event ids shown as turns) as one
    markup text."""
    parts = []
    if v.status != "ok":
        parts.append(f"[red]error[/]: {escape(v.error or '?')}")
    else:
        said = "[red]wrong[/]" if v.label == 0 else "right" if v.label == 1 else "no opinion"
        if v.score is not None:
            said += f", score {_num(v.score)}"
        if v.categories:
            said += f", {escape(', '.join(v.categories))}"
        parts.append(said)
    if v.rationale:
        parts.append(escape(_cut(v.rationale, 600)))
    if v.evidence:
        cited = _compact(by_turn(dict(v.evidence), turns))
        parts.append(f"[dim]evidence[/] {escape(_cut(cited, 600))}")
    return "\n".join(parts)


def _verdicts(c: Console, tr: Transcript) -> None:
    t = Table(title=f"Verdicts ({len(tr.verdicts)})", title_justify="left", expand=True)
    t.add_column("judge", overflow="fold")
    t.add_column("on", no_wrap=True)
    t.add_column("said", ratio=1, overflow="fold")
    turns = {s.event_id: s.turn for s in (*tr.steps, *tr.gate)}
    for v in tr.verdicts:
        on = "conversation" if v.item_id is None else f"turn {v.turn}"
        t.add_row(f"{escape(v.judge)} {escape(v.judge_version)}", on, verdict_text(v, turns))
    if tr.verdicts:
        c.print(t)
    else:
        c.print("Verdicts: none (not judged yet, or not in the judged sample)")


def _gate(c: Console, tr: Transcript) -> None:
    if not tr.gate:
        c.print("Gate decisions: none")
        return
    t = Table(title=f"Gate decisions ({len(tr.gate)})", title_justify="left", expand=True)
    for col in ("time", "turn", "decision"):
        t.add_column(col, no_wrap=True)
    t.add_column("why", ratio=1, overflow="fold")
    for s in tr.gate:
        d = s.detail
        decision = str(d.get("decision")) + ("" if d.get("enforced", True) else " (shadow)")
        why = (
            f"confidence {_num(d.get('confidence'))}, calibrated {_num(d.get('calibrated'))},"
            f" threshold {_num(d.get('threshold'))} ({escape(str(d.get('threshold_source')))})"
        )
        if d.get("degraded"):
            why += f"; [yellow]degraded: {escape(str(d['degraded']))}[/]"
        for f in d.get("findings", []):
            why += (
                f"\n{escape(str(f.get('judge')))}"
                f"{' ' + escape(str(f['category'])) if f.get('category') else ''}:"
                f" {escape(str(f.get('critique', '')))}"
            )
        turn = "-" if s.turn is None else str(s.turn)
        t.add_row(f"{s.at:%H:%M:%S}", turn, escape(decision), why)
    c.print(t)


def render(c: Console, tr: Transcript) -> None:
    """The text form of ``tr`` (module docstring) on ``c``."""
    _header(c, tr)
    c.print()
    _transcript(c, tr)
    c.print()
    _verdicts(c, tr)
    c.print()
    _gate(c, tr)
    c.print()
    c.print(f"Sample: {escape(tr.sample.describe())}")


def register(app: typer.Typer) -> None:
    @app.command("conversation")
    def conversation(
        conversation_id: str = typer.Argument(
            ..., metavar="ID", help="The conversation id (as in the dashboards and alerts)."
        ),
        as_json: bool = ac.JSON,
    ) -> None:
        """One conversation, redacted: its events in order, its verdicts with their evidence,
        its gate decisions and its sampling decision."""
        out = console()
        err = Console(stderr=True, highlight=False)
        if not conversation_id.strip():
            err.print("[red]no conversation id[/]: give the id of a stored conversation")
            raise typer.Exit(2)
        found = ac.run_with_engine(
            err, lambda engine: load_transcript(engine, conversation_id), reads=True
        )
        if found is None:
            err.print(
                f"[red]unknown conversation[/] {escape(repr(conversation_id))}: no conversation"
                " with this id is stored (never written, or removed by retention)",
                soft_wrap=True,
            )
            raise typer.Exit(2)
        if as_json:
            ac.print_json(found)
            return
        render(out, found)
