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

from datetime import datetime
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from monitor.cli import analytics_common as ac
from monitor.judges.transcript import (
    Step,
    Transcript,
    gate_text,
    step_text,
    turns_of,
    verdict_text,
)
from monitor.judges.transcript_repo import load_transcript

WIDTH = 100  # the layout's width when the output is not a terminal (or a narrower one)


def console() -> Console:
    """A terminal's console when at least :data:`WIDTH` wide, else one of :data:`WIDTH`."""
    c = Console(highlight=False)
    return c if c.is_terminal and c.width >= WIDTH else Console(width=WIDTH, highlight=False)


def _t(at: datetime | None) -> str:
    return "-" if at is None else f"{at:%Y-%m-%d %H:%M:%S}"


def _num(x: Any, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


#: how the who column looks per kind of step (failures in red)
_STYLES = {"tool FAILED": "red", "escalation": "bold", "outcome": "bold", "gate": "cyan"}


def _row(step: Step) -> tuple[str, str]:
    who, what = step_text(step)
    style = _STYLES.get(who)
    shown = escape(who) if style is None else f"[{style}]{escape(who)}[/]"
    return shown, escape(what)


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
        who, what = _row(s)
        t.add_row(f"{s.at:%H:%M:%S}", "-" if s.turn is None else str(s.turn), who, what)
    c.print(t)


def _verdicts(c: Console, tr: Transcript) -> None:
    t = Table(title=f"Verdicts ({len(tr.verdicts)})", title_justify="left", expand=True)
    t.add_column("judge", overflow="fold")
    t.add_column("on", no_wrap=True)
    t.add_column("said", ratio=1, overflow="fold")
    turns = turns_of(tr)
    for v in tr.verdicts:
        on = "conversation" if v.item_id is None else f"turn {v.turn}"
        said = escape(verdict_text(v, turns))
        if v.flagged or v.status != "ok":
            first, _, rest = said.partition("\n")
            said = f"[red]{first}[/]" + (f"\n{rest}" if rest else "")
        t.add_row(f"{escape(v.judge)} {escape(v.judge_version)}", on, said)
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
        decision, _, why = gate_text(s).partition(": ")
        turn = "-" if s.turn is None else str(s.turn)
        t.add_row(f"{s.at:%H:%M:%S}", turn, escape(decision), escape(why))
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
