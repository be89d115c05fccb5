"""`monitor report`: an agent to act on lists its worst conversations, picked by the dashboards'
Examples rules (the same SQL functions), each with why, the `monitor conversation ID` command
and its transcript folded and redacted; on a real Postgres with a real tau2 conversation and one
whose content holds secrets."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import typer
from typer.testing import CliRunner

from monitor.alerts.states import AlertState, Status, fingerprint
from monitor.analytics.examples import worst_conversations
from monitor.cli import report
from monitor.contract.events import AgentEvent
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.replay.tau2 import tau2_file_events
from monitor.report.examples import rules_for
from monitor.store.engine import libpq_url, make_engine
from tests.factories import SECRET_ID, SECRETS, T0, secret_events

AGENT = "support-bot"


async def fire_critical(url: str, agent: str, at: datetime) -> None:
    """A firing critical alert on ``agent`` with its history row (as the worker stores it)."""
    scope = {"agent": agent}
    fp = fingerprint("escalation_inversion", scope)
    state = AlertState(
        fp,
        "escalation_inversion",
        scope,
        Status.FIRING,
        active_since=at,
        fired_at=at,
        last_notified_at=at,
        notified=1,
        last_value=1.0,
        last_samples=40.0,
        version=1,
    )
    conn = await asyncpg.connect(libpq_url(url))
    try:
        await conn.execute(
            "INSERT INTO alert_states (fingerprint, rule, scope, status, state, version)"
            " VALUES ($1, 'escalation_inversion', $2::jsonb, 'firing', $3::jsonb, 1)",
            fp,
            json.dumps(scope),
            json.dumps(state.to_dict()),
        )
        await conn.execute(
            "INSERT INTO alert_history (fingerprint, rule, kind, severity, scope, value,"
            " threshold, summary, at, idempotency_key, samples)"
            " VALUES ($1, 'escalation_inversion', 'firing', 'critical', $2::jsonb, 1, 1, $3,"
            " $4, $5, 40)",
            fp,
            json.dumps(scope),
            f"Escalation rate rises with confidence for {agent}: the threshold is inverted",
            at,
            f"{fp}:firing",
        )
    finally:
        await conn.close()


@pytest.fixture
async def stored(database_url: str, writer: EventWriter, tau2_files: list[Path]) -> str:
    tau2: list[AgentEvent] = list(tau2_file_events(tau2_files[0]))
    # the tau2 conversations, run again as the support agent's own a day before the secrets
    shift = T0 - timedelta(days=1) - min(e.ts for e in tau2)
    mine = [
        e.model_copy(update={"ts": e.ts + shift, "agent": e.agent.model_copy(update={"id": AGENT})})
        for e in tau2
    ]
    await writer.write([event_row(e) for e in [*mine, *secret_events()]])
    await fire_critical(database_url, AGENT, T0)
    return database_url


def run_report(url: str, out: Path) -> Any:
    app = typer.Typer()
    app.callback()(lambda: None)
    report.register(app)
    span = [
        "--from",
        (T0 - timedelta(days=2)).isoformat(),
        "--to",
        (T0 + timedelta(days=1)).isoformat(),
    ]
    return CliRunner().invoke(
        app, ["report", *span, "--out", str(out)], env={"MONITOR_DATABASE_URL": url}
    )


def test_rules_follow_the_reason() -> None:
    assert rules_for("drift in the latest check")[0] == "drift"
    assert rules_for("escalates more often when it is more confident")[0] == "escalation"
    assert rules_for("critical alert authorization_fabrication: x fabricated")[0] == "judges"
    assert rules_for("ECE 0.21, at least 0.13")[0] == "calibration"
    assert sorted(rules_for("anything")) == sorted(["calibration", "drift", "escalation", "judges"])


def test_an_agent_to_act_on_shows_its_worst_conversations_redacted(
    stored: str, tmp_path: Path
) -> None:
    result = run_report(stored, tmp_path)
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report.html").read_text()
    for secret in SECRETS:
        assert secret not in page and html.escape(secret) not in page, secret
    block = page[page.index(f'id="agent-{AGENT}"') :]
    block = block[: block.index("<h3", 10)] if "<h3" in block[10:] else block
    assert "<h4>Worst conversations</h4>" in block
    summaries = re.findall(r"<details class='example'><summary>(.*?)</summary>", block, re.S)
    assert summaries and len(summaries) <= 5
    assert len(re.findall(r"<code>monitor conversation [^<]+</code></p>", block)) == len(summaries)
    # the secret conversation is picked (escalated at 0.93; wrong at 0.93) and shown redacted
    assert f"<code>monitor conversation {SECRET_ID}</code>" in block
    mine = block[block.index(f"<code>{SECRET_ID}</code>") :]
    mine = mine[: mine.index("</details>")]
    text = html.unescape(mine)
    (line,) = [html.unescape(s) for s in summaries if SECRET_ID in s]
    assert re.match(
        rf"(escalation|calibration): <code>{SECRET_ID}</code> \(2026-01-01 00:00\)", line
    )
    for mark in ("[secret]", "[card]", "[email]", "[phone]"):
        assert mark in text, mark
    assert "escalated (trigger policy, turn 3)" in text and "-> charge(" in text
    assert "Sample: kept" in text
    # the rules are the dashboards' functions: the same conversations in the same order
    assert any(s.startswith("escalation: ") for s in summaries)


async def test_the_report_picks_what_the_panels_pick(stored: str) -> None:
    engine = make_engine(stored)
    try:
        start, end = T0 - timedelta(days=2), T0 + timedelta(days=1)
        esc = await worst_conversations(engine, "escalation", start, end, AGENT, 2)
        cal = await worst_conversations(engine, "calibration", start, end, AGENT, 2)
        everyone = await worst_conversations(engine, "escalation", start, end, None, 2)
        assert await worst_conversations(engine, "judges", start, end, "nobody", 2) == []
        with pytest.raises(ValueError, match="no examples rule"):
            await worst_conversations(engine, "nope", start, end)
    finally:
        await engine.dispose()
    first = esc[0]
    assert first.conversation_id == SECRET_ID and first.confidence == pytest.approx(0.93)
    assert first.why == "escalated (policy) although its lowest confidence was 0.93"
    assert any(e.conversation_id == SECRET_ID for e in cal)
    assert cal[0].why.startswith("stated 0.93 and was wrong (label from outcome:")
    assert [e.conversation_id for e in everyone] == [e.conversation_id for e in esc]
    assert datetime(2025, 12, 1, tzinfo=UTC) < first.at < end
