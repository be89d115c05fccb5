"""What ``monitor up`` prints at the end: what landed, and where to look next (rich tables)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from monitor.contract.events import EVENT_TYPES
from monitor.replay.send import ReplayReport
from monitor.sim.traffic import AgentSpec
from monitor.stack.demo import TrafficPlan, malformed_events
from monitor.stack.runner import Running, shown_url
from monitor.stack.summary import Summary

_BAD_WHAT = {
    "not_json": "truncated JSON",
    "out_of_range": "confidence 1.7",
    "unknown_type": 'type "thought"',
    "missing_field": "no conversation_id",
    "invalid_value": "timestamp without a time zone",
}


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def _truth(spec: AgentSpec) -> str:
    gap = f"confidence - {spec.overconfidence:g}"
    if spec.behaviour == "overconfident":
        return f"P(success) = {gap}"
    if spec.behaviour == "drifting" and spec.change_point is not None:
        until = (
            f" until {spec.recovery_point:%H:%M}, then confidence again"
            if spec.recovery_point is not None
            else ""
        )
        return f"P(success) = confidence until {spec.change_point:%H:%M} UTC, then {gap}{until}"
    if spec.behaviour == "inverted":
        return "P(success) = confidence, but it escalates more often the more confident it is"
    return "P(success) = confidence"


def print_summary(
    console: Console, plan: TrafficPlan, report: ReplayReport, summary: Summary
) -> None:
    """Three tables for this run: conversations per agent, events by type, dead letters."""
    agents = Table(
        title=f"Conversations: {summary.conversations:,} stored (this run)", title_justify="left"
    )
    agents.add_column("agent", no_wrap=True)
    for name in ("conversations", "escalated", "confidence", "success"):
        agents.add_column(name, justify="right", no_wrap=True)
    for a in summary.agents:
        confidence = "-" if a.mean_confidence is None else f"{100 * a.mean_confidence:.0f}%"
        agents.add_row(
            a.agent_id,
            f"{a.conversations:,}",
            _pct(a.escalated_share),
            confidence,
            _pct(a.success_share),
        )
    console.print()
    console.print(agents)
    console.print(
        "confidence: mean of each conversation's lowest stated confidence; success: "
        "share of outcomes reporting success. Calibrated agents have the two close. "
        "What the simulator built in:",
        soft_wrap=True,
    )
    for a in summary.agents:
        spec = plan.simulator.agents_by_id.get(a.agent_id)
        if spec is not None:
            console.print(f"  {a.agent_id}: {_truth(spec)}", soft_wrap=True, highlight=False)

    sent = report.counts.as_dict()
    events = Table(title="Events by type", title_justify="left")
    for name in ("type", "sent", "stored"):
        events.add_column(name, justify="left" if name == "type" else "right")
    for kind in EVENT_TYPES:
        events.add_row(kind, f"{sent[kind]:,}", f"{summary.events_by_type.get(kind, 0):,}")
    events.add_row("[bold]total[/]", f"[bold]{report.sent:,}[/]", f"[bold]{summary.events:,}[/]")
    console.print()
    console.print(events)

    sent_bad = {reason for reason, _ in malformed_events(plan.marker)}
    dlq = Table(title=f"Dead letters (DLQ): {summary.dead_letters} stored", title_justify="left")
    for name in ("reason", "count", "what was sent"):
        dlq.add_column(name, justify="right" if name == "count" else "left")
    for reason in sorted(sent_bad | set(summary.dead_letters_by_reason)):
        dlq.add_row(
            reason, str(summary.dead_letters_by_reason.get(reason, 0)), _BAD_WHAT.get(reason, "")
        )
    console.print()
    console.print(dlq)
    if summary.dead_letters >= len(sent_bad):
        console.print(
            f"These are the {len(sent_bad)} malformed events sent on purpose: each went "
            "to the DLQ topic and the dead_letters table with its reason, and the "
            "worker carried on.",
            soft_wrap=True,
        )


def monitor_command() -> str:
    """How to call ``monitor`` from this shell: ``monitor`` if it is on PATH (this one), else
    the venv's script relative to the current directory, else ``python -m monitor.cli``."""
    script = Path(sys.executable).parent / "monitor"
    on_path = shutil.which("monitor")
    if on_path and Path(on_path).resolve() == script.resolve():
        return "monitor"
    if script.exists():
        rel = os.path.relpath(script)
        return rel if rel.startswith(".") or rel.startswith("/") else f"./{rel}"
    return f"{sys.executable} -m monitor.cli"


def _tau2_example() -> str:
    """A tau2-bench results file to replay, relative to the current directory if possible."""
    roots = (
        Path.cwd() / "tests" / "data" / "tau2",
        Path(__file__).resolve().parents[2] / "tests" / "data" / "tau2",
    )
    for root in roots:
        files = sorted(root.glob("*.json"))
        if files:
            return os.path.relpath(files[0])
    return "results.json"


def _curl(running: Running) -> str:
    event = {
        "schema": "agent-event/v1",
        "event_id": "hello-1",
        "type": "message",
        "ts": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "conversation_id": "hello",
        "agent": {"id": "my-bot"},
        "message": {"role": "assistant", "content": "Hi! How can I help?", "confidence": 0.9},
    }
    return (
        f"curl -X POST {running.web_url}/v1/events -H 'Authorization: Bearer "
        f"{running.ingest_token}' -H 'Content-Type: application/json' "
        f"-d {shlex.quote(json.dumps([event]))}"
    )


def print_next_steps(console: Console, running: Running, keep_running: bool) -> None:
    """Where to look next: URLs, psql, replay, HTTP ingest with the token, logs, Ctrl-C."""
    state_dir = running.settings.state_dir
    env = "" if state_dir == Path(".monitor").resolve() else f"MONITOR_STATE_DIR={state_dir} "
    monitor = env + monitor_command()
    db = shown_url(running.database_url)
    lines = [
        ("worker", f"{running.web_url}/health   {running.web_url}/metrics"),
        (
            "otlp",
            f"{running.web_url}/v1/traces   {running.web_url}/v1/logs   "
            f"grpc://{running.otlp_grpc} (same token)",
        ),
        (
            "gate",
            f"{running.gate_url}/v1/gate   {running.gate_url}/health   {running.gate_url}/metrics",
        ),
        ("database", f"psql {db}"),
        (
            "",
            f"psql {db} -c 'select agent_id, count(*), avg(min_confidence) as confidence, "
            "avg(outcome_success::int) as success from conversations group by 1'",
        ),
        ("replay", f"{monitor} replay {_tau2_example()}"),
        ("simulate", f"{monitor} simulate --conversations 500"),
        ("HTTP ingest", _curl(running)),
    ]
    logs = [state_dir / "worker.log", state_dir / "gate.log"]
    logs += [state_dir / "tansu.log"] if running.embedded_broker else []
    logs += [state_dir / "pg" / "server.log"] if running.embedded_database else []
    lines.append(("logs", "  ".join(str(p) for p in logs)))
    console.print()
    console.print(
        "[bold]Where to look next[/]"
        + (
            ""
            if keep_running
            else " (these need the stack up: rerun with --keep-running and use a second terminal)"
        ),
        soft_wrap=True,
    )
    for label, text in lines:
        console.print(f"  [cyan]{label:<12}[/]{escape(text)}", soft_wrap=True, highlight=False)
    again = (
        f"the data in {state_dir}/pg stays until then, and the next run starts clean"
        if running.embedded_database
        else "the configured database keeps everything: each run adds its conversations"
    )
    console.print(
        f"  Ctrl-C stops everything; rerunning `monitor up` is safe ({again}).", soft_wrap=True
    )
