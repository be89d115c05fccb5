"""Gate effectiveness: the pure computation with plain values, and ``monitor gate --json`` on
a real Postgres seeded through the ingest writer with simulated traffic (replayed decisions)
and tau2 conversations carrying recorded decision events."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from monitor.cli.main import app
from monitor.contract.events import AgentEvent, validate_event
from monitor.gate.effect import GatedConversation, UngatedCounts, effectiveness
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.replay.tau2 import tau2_file_events
from monitor.sim.agents import default_agents
from monitor.sim.traffic import Simulator
from tests.factories import event_dict

START = datetime(2026, 6, 1, tzinfo=UTC)


def gate_json(database_url: str, *options: str) -> dict[str, Any]:
    """The answer of ``monitor gate --json OPTIONS`` on ``database_url`` (which must exit 0)."""
    result = CliRunner().invoke(
        app,
        ["gate", "--json", *options],
        env={"MONITOR_DATABASE_URL": database_url, "DATABASE_URL": database_url},
    )
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.output)
    return out


def test_failures_prevented_and_the_human_cost() -> None:
    rows = [GatedConversation("a", "d", "escalate", False)] * 3 + [
        GatedConversation("a", "d", "revise", False),
        GatedConversation("a", "d", "revise", True),
        GatedConversation("a", "d", "proceed", False),
        *[GatedConversation("a", "d", "proceed", True)] * 13,
        GatedConversation("a", "d", "proceed", None),
    ]
    (e,) = effectiveness(rows)
    assert e.conversations == 20 and e.with_outcome == 19
    assert e.decisions == {"proceed": 15, "revise": 2, "escalate": 3}
    assert (e.failures_prevented.k, e.failures_prevented.n) == (4, 5)
    assert e.failure_rate_all.value == pytest.approx(5 / 19)
    assert e.failure_rate_proceeded.value == pytest.approx(1 / 14)
    assert e.relative_reduction == pytest.approx(1 - (1 / 14) / (5 / 19))
    assert e.escalation_rate.value == pytest.approx(3 / 20)
    assert e.revise_failure_rate.value == pytest.approx(1 / 2)
    lo, hi = e.failures_prevented.low, e.failures_prevented.high
    assert lo is not None and hi is not None and lo < 0.8 < hi and hi < 1  # Wilson, n = 5
    assert e.notes == ["1 conversations have no outcome yet"]
    with pytest.raises(ValueError, match="unknown decision"):
        effectiveness([GatedConversation("a", "d", "block", True)])


async def _seed(url: str, events: list[AgentEvent]) -> None:
    w = EventWriter(url)
    try:
        for i in range(0, len(events), 3000):
            await w.write([event_row(e) for e in events[i : i + 3000]])
    finally:
        await w.close()


def test_monitor_gate_json_on_replayed_and_recorded_data(
    database_url: str, tau2_files: list[Path], tmp_path: Path
) -> None:
    sim = list(Simulator(5, START, default_agents(START + timedelta(hours=5))).events(600))
    tau2 = [e for f in tau2_files for e in tau2_file_events(f)]
    outcome = {e.conversation_id: e.outcome.success for e in tau2 if e.outcome is not None}
    failed = sorted(c for c, ok in outcome.items() if not ok)[:2]
    passed = sorted(c for c, ok in outcome.items() if ok)[:2]
    agent_of = {e.conversation_id: e.agent.id for e in tau2}
    recorded = [
        (failed[0], "escalate"),
        (failed[1], "proceed"),
        (passed[0], "proceed"),
        (passed[1], "revise"),
    ]
    gates = [
        validate_event(
            event_dict(
                f"gate:{i}",
                cid,
                "gate",
                at=i,
                agent=agent_of[cid],
                context={"domain": "airline"},
                decision=d,
            )
        )
        for i, (cid, d) in enumerate(recorded)
    ]
    # an earlier decision in the same conversation is superseded by the latest one
    gates.append(
        validate_event(
            event_dict(
                "gate:old",
                failed[0],
                "gate",
                at=-10,
                agent=agent_of[failed[0]],
                decision="proceed",
                context={"domain": "airline"},
            )
        )
    )
    asyncio.run(_seed(database_url, sim + tau2 + gates))
    policy = tmp_path / "gate.yaml"
    policy.write_text('version: "p-1"\nrules:\n  - threshold: 0.6\n')
    out = gate_json(
        database_url, "--policy", str(policy), "--from", "2000-01-01", "--to", "2100-01-01"
    )
    assert out["policy_version"] == "p-1"
    effects = {(e["agent_id"], e["domain"], e["source"]): e for e in out["effects"]}

    # independent: each simulated conversation's minimum assistant confidence vs 0.6
    conv: dict[str, dict[str, Any]] = defaultdict(dict)
    for e in sim:
        c = conv[e.conversation_id]
        c["key"] = (e.agent.id, (e.context.domain if e.context else None) or "", "replayed")
        if e.message is not None and e.message.role == "assistant" and e.confidence is not None:
            c["min"] = min(c.get("min", 1.0), e.confidence)
        if e.outcome is not None:
            c["ok"] = e.outcome.success
    want: dict[Any, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for c in conv.values():
        if "min" not in c:
            continue
        w = want[c["key"]]
        decision = "escalate" if c["min"] < 0.6 else "proceed"
        w[decision] += 1
        if c.get("ok") is False:
            w["failures"] += 1
            w["prevented"] += decision == "escalate"
    replayed = {k: v for k, v in effects.items() if k[2] == "replayed"}
    assert set(replayed) == set(want) and len(want) >= 3
    for key, w in want.items():
        got = replayed[key]
        assert got["decisions"]["escalate"] == w["escalate"], key
        assert got["decisions"]["proceed"] == w["proceed"], key
        assert got["failures_prevented"]["k"] == w["prevented"], key
        assert got["failures_prevented"]["n"] == w["failures"], key
    assert any(e["failures_prevented"]["k"] > 0 for e in replayed.values())

    rec = [e for k, e in effects.items() if k[2] == "recorded"]
    assert sum(e["conversations"] for e in rec) == 4
    assert sum(e["decisions"]["escalate"] for e in rec) == 1  # the latest decision counts
    assert sum(e["failures_prevented"]["k"] for e in rec) == 1
    assert sum(e["failures_prevented"]["n"] for e in rec) == 2
    assert sum(e["failure_rate_proceeded"]["k"] for e in rec) == 1


def test_the_ungated_baseline_sits_beside_recorded_rows_only() -> None:
    rows = [GatedConversation("a", "d", "proceed", True)] * 3 + [
        GatedConversation("a", "d", "proceed", False),
        GatedConversation("a", "d", "escalate", False, "replayed"),
    ]
    base = [UngatedCounts("a", "d", 10, 8, 4), UngatedCounts("a", "other", 3, 3, 3)]
    recorded, replayed = effectiveness(rows, base)
    assert recorded.source == "recorded" and recorded.ungated_conversations == 10
    assert recorded.failure_rate_ungated is not None
    assert (recorded.failure_rate_ungated.k, recorded.failure_rate_ungated.n) == (4, 8)
    lo, hi = recorded.failure_rate_ungated.low, recorded.failure_rate_ungated.high
    assert lo is not None and hi is not None and lo < 0.5 < hi  # Wilson, n = 8
    assert recorded.reduction_vs_ungated == pytest.approx(1 - 0.25 / 0.5)
    assert replayed.source == "replayed" and replayed.failure_rate_ungated is None
    assert effectiveness(rows)[0].failure_rate_ungated is None  # no baseline given


def test_monitor_gate_json_reports_the_ungated_failure_rate(database_url: str) -> None:
    def conv(
        cid: str,
        agent: str,
        at: float,
        ok: bool | None,
        domain: str = "retail",
        decision: str | None = None,
    ) -> list[AgentEvent]:
        ctx = {"domain": domain}
        out = [event_dict(f"{cid}-m", cid, "message", at=at, agent=agent, context=ctx)]
        if ok is not None:
            out.append(
                event_dict(
                    f"{cid}-o", cid, "outcome", at=at + 5, agent=agent, context=ctx, success=ok
                )
            )
        if decision is not None:
            out.append(
                event_dict(
                    f"gate:{cid}",
                    cid,
                    "gate",
                    at=at + 1,
                    agent=agent,
                    context=ctx,
                    decision=decision,
                )
            )
        return [validate_event(e) for e in out]

    events: list[AgentEvent] = []
    for i, (ok, decision) in enumerate(
        [(True, "proceed"), (False, "proceed"), (False, "escalate"), (True, "proceed")]
    ):
        events += conv(f"g{i}", "gated-bot", 100 + i, ok, decision=decision)
    for i, ok in enumerate([False, False, True, True, None]):  # ungated, retail
        events += conv(f"u{i}", "gated-bot", 200 + i, ok)
    events += conv("u-air", "gated-bot", 300, False, domain="airline")  # no recorded row there
    events += conv("u-old", "gated-bot", -2 * 86400, False)  # before the range
    events += conv("free", "free-bot", 400, False)  # never gated: no baseline row
    asyncio.run(_seed(database_url, events))
    out = gate_json(database_url, "--no-replay", "--from", "2025-12-31", "--to", "2026-01-02")
    (e,) = out["effects"]
    assert (e["agent_id"], e["domain"], e["source"]) == ("gated-bot", "retail", "recorded")
    assert e["conversations"] == 4 and e["failure_rate_proceeded"]["k"] == 1
    assert e["failure_rate_proceeded"]["n"] == 3
    assert e["ungated_conversations"] == 5
    ungated = e["failure_rate_ungated"]
    assert (ungated["k"], ungated["n"], ungated["value"]) == (2, 4, 0.5)
    assert ungated["low"] < 0.5 < ungated["high"]
    assert e["reduction_vs_ungated"] == pytest.approx(1 - (1 / 3) / 0.5)


def test_shadow_rows_are_reported_apart_without_the_ungated_baseline() -> None:
    rows = [
        GatedConversation("a", "d", "proceed", True),
        GatedConversation("a", "d", "escalate", False, "shadow"),
        GatedConversation("a", "d", "proceed", False, "shadow"),
    ]
    recorded, shadow = effectiveness(rows, [UngatedCounts("a", "d", 10, 8, 4)])
    assert (recorded.source, shadow.source) == ("recorded", "shadow")
    assert shadow.conversations == 2 and shadow.decisions["escalate"] == 1
    assert (shadow.failures_prevented.k, shadow.failures_prevented.n) == (1, 2)
    assert shadow.failure_rate_ungated is None and recorded.failure_rate_ungated is not None
    assert any("shadow" in n for n in shadow.notes) and not recorded.notes
