"""`monitor conversation ID` on a real Postgres: a real tau2 conversation written through the
ingest writer and judged by the deterministic judges, and one whose content holds secrets,
card numbers, emails and phone numbers (redacted in the text and in ``--json``)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from typer.testing import CliRunner

from monitor.cli.main import app
from monitor.contract.events import AgentEvent
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.judges.base import Conversation, Verdict
from monitor.judges.deterministic import run_all
from monitor.judges.repo import write_verdicts
from monitor.replay.tau2 import tau2_file_events
from monitor.store.engine import libpq_url
from tests.factories import SECRET_ID, SECRETS, secret_events


def tau2_conversation(path: Path) -> list[AgentEvent]:
    """The first conversation of a tau2 file with a failed tool call and an escalation."""
    by_conv: dict[str, list[AgentEvent]] = {}
    for e in tau2_file_events(path):
        by_conv.setdefault(e.conversation_id, []).append(e)
    for evs in by_conv.values():
        kinds = {e.type for e in evs}
        failed = any(e.tool_result is not None and not e.tool_result.ok for e in evs)
        if failed and {"escalation", "outcome"} <= kinds:
            return evs
    raise AssertionError(f"{path} has no conversation with a failed call and an escalation")


@pytest.fixture
async def stored(
    database_url: str, writer: EventWriter, tau2_files: list[Path]
) -> AsyncIterator[tuple[str, list[AgentEvent]]]:
    tau2 = tau2_conversation(tau2_files[0])
    await writer.write([event_row(e) for e in [*tau2, *secret_events()]])
    verdicts = run_all(Conversation.of(tau2))
    verdicts.append(
        Verdict(
            "llm-rubric",
            "v1",
            SECRET_ID,
            "s1",
            label=0,
            score=0.1,
            categories=("fabrication", "fabrication:authorization"),
            evidence={"quote": "password=hunter2", "card": "4111111111111111"},
            rationale="it echoed the customer's card 4111 1111 1111 1111 back",
        )
    )
    pool = await asyncpg.create_pool(libpq_url(database_url), min_size=1, max_size=1)
    try:
        await write_verdicts(
            pool, {tau2[0].conversation_id: tau2[0].agent.id, SECRET_ID: "support-bot"}, verdicts
        )
    finally:
        await pool.close()
    yield tau2[0].conversation_id, tau2


def run(url: str, *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"MONITOR_DATABASE_URL": url})


def flat(text: str) -> str:
    """The output with the table's wrapping undone (words joined by single spaces)."""
    return " ".join(re.sub(r"[│┃┆|]", " ", text).split())


def test_a_real_conversation_in_order_at_100_columns(
    database_url: str, stored: tuple[str, list[AgentEvent]]
) -> None:
    cid, events = stored
    result = run(database_url, "conversation", cid)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    shown = flat(result.stdout)
    assert f"Conversation {cid}" in shown and events[0].agent.id in shown
    # every tool named, every failure said, the escalation and the outcome with source
    for e in events:
        if e.tool_result is not None:
            assert e.tool_result.name in shown
    assert "FAILED" in shown and "error: Error:" in shown
    esc = next(e for e in events if e.escalation is not None)
    assert f"escalated (trigger {esc.escalation.trigger}, turn {esc.turn})" in shown
    outcome = next(e for e in events if e.outcome is not None)
    said = "succeeded" if outcome.outcome.success else "failed"
    assert f"{said}, source {outcome.outcome.source}" in shown and "arrived" in shown
    # the messages' words appear in the order they were said
    at = 0
    for e in events:
        if e.message is not None and e.message.content:
            words = " ".join(e.message.content.split()[:4])
            found = shown.find(words, at)
            assert found >= 0, words
            at = found
    assert re.search(r"Verdicts \(\d+\)", shown) and "det." in shown
    assert "Gate decisions: none" in shown
    assert "Sample: kept" in shown or "Sample: unsampled" in shown

    doc = json.loads(run(database_url, "conversation", cid, "--json").stdout)
    assert doc["conversation_id"] == cid and doc["redacted"] is True
    want = sorted(events, key=lambda e: (e.ts, e.turn is None, e.turn or 0, e.event_id))
    assert [s["event_id"] for s in doc["events"]] == [e.event_id for e in want]
    for s, e in zip(doc["events"], want, strict=True):
        assert s["type"] == e.type and s["turn"] == e.turn
        if e.tool_result is not None:
            assert s["tool_result"]["ok"] is e.tool_result.ok
        if e.message is not None:
            assert s["message"]["role"] == e.message.role
    assert doc["conversation"]["escalation_turn"] == esc.turn
    assert doc["conversation"]["outcome_source"] == outcome.outcome.source
    assert doc["verdicts"] and all(v["judge"].startswith("det.") for v in doc["verdicts"])
    assert doc["sample"]["events"] == len(events)
    assert doc["sample"]["kept"] is (doc["sample"]["kept_events"] == len(events))


def test_secrets_are_redacted_in_text_and_json(
    database_url: str, stored: tuple[str, list[AgentEvent]]
) -> None:
    for args in ((), ("--json",)):
        result = run(database_url, "conversation", SECRET_ID, *args)
        assert result.exit_code == 0, result.output
        for secret in SECRETS:
            assert secret not in result.stdout, (args, secret)
            assert secret not in flat(result.stdout), (args, secret)
        for mark in ("[secret]", "[card]", "[email]", "[phone]"):
            assert mark in result.stdout, (args, mark)
    doc = json.loads(run(database_url, "conversation", SECRET_ID, "--json").stdout)
    call = doc["events"][1]["message"]["tool_calls"][0]
    assert call["arguments"] == {
        "api_key": "[secret]",
        "card": "[card]",
        "note": "key [secret]",
    }
    (gate,) = doc["gate_decisions"]
    assert gate["gate"]["findings"][0]["critique"] == "quotes password=[secret]"
    (verdict,) = doc["verdicts"]
    assert verdict["turn"] == 1 and verdict["evidence"] == {
        "quote": "password=[secret]",
        "card": "[card]",
    }
    assert verdict["rationale"] == "it echoed the customer's card [card] back"
    text = flat(run(database_url, "conversation", SECRET_ID).stdout)
    assert "escalated (trigger policy, turn 3)" in text and "call the customer at [phone]" in text
    assert "assistant 0.93" in text and "failed, source human_review" in text
    assert "Gate decisions (1)" in text and "escalate" in text
    assert "score -1.00 from csat: reach me at [email]" in text


@pytest.mark.parametrize("as_json", [False, True])
def test_an_unknown_or_missing_id_is_a_clear_error(database_url: str, as_json: bool) -> None:
    extra = ["--json"] if as_json else []
    result = run(database_url, "conversation", "no-such-conversation", *extra)
    assert result.exit_code == 2
    assert result.stdout == ""
    err = " ".join(result.stderr.split())
    assert "unknown conversation 'no-such-conversation'" in err and "Traceback" not in err
    blank = run(database_url, "conversation", " ", *extra)
    assert blank.exit_code == 2 and "no conversation id" in blank.stderr
    missing = run(database_url, "conversation", *extra)
    assert missing.exit_code == 2 and "Missing argument 'ID'" in missing.stderr
