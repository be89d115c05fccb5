"""The inline LLM check of a gate rule, against the real loopback chat-completions server:
a finding revises, a slow or failing server gives the rule's on_llm_timeout with ``degraded``
saying so, rules without ``llm`` never call it."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from monitor.config import Settings
from monitor.core.errors import ConfigError
from monitor.core.resilience import RetryPolicy
from monitor.gate.checks import CheckSet
from monitor.gate.endpoint import GateLimits, GateReply, decide_gate, finish_gate
from monitor.gate.policy import GatePolicy, load_policy
from monitor.gate.state import GateState, gate_llm_judge
from monitor.judges.llm import LLMJudge, LLMJudgeConfig
from tests.servers.llm_server import ChatServer, Hang, Reply, Status, verdicts_json

NOW = datetime(2026, 3, 1, tzinfo=UTC)
ITEM = "gate:r1:message"  # the proposed message's id the LLM grades
FAILING = verdicts_json(
    {
        "item_id": ITEM,
        "label": 0,
        "correctness": 0.1,
        "categories": ["fabrication"],
        "fabrication_type": "authorization",
        "rationale": "says the refund is done; no tool did it",
    }
)
PASSING = verdicts_json({"item_id": ITEM, "label": 1})


def policy(on_timeout: str = "skip", timeout_ms: int = 300, threshold: float = 0.5) -> GatePolicy:
    return load_policy(
        f"""version: llm-1
rules:
  - agent: llm-bot
    threshold: {threshold}
    checks: [det.authorization, llm]
    llm_timeout_ms: {timeout_ms}
    on_llm_timeout: {on_timeout}
    deadline_ms: 10000
  - agent: plain-bot
    threshold: 0.5
""",
        "gate.yaml",
    )


def body(agent: str = "llm-bot", confidence: float = 0.9) -> bytes:
    return json.dumps(
        {
            "conversation_id": "c1",
            "agent": {"id": agent},
            "request_id": "r1",
            "content": "Your refund of $40 has been issued.",
            "confidence": confidence,
            "domain": "retail",
        }
    ).encode()


def first(p: GatePolicy, raw: bytes) -> GateReply:
    return decide_gate(
        raw,
        limits=GateLimits(1 << 20, 2000),
        policy=p,
        maps={},
        checks=CheckSet(),
        now=NOW,
        timer=time.perf_counter,
        started=time.perf_counter(),
        new_id=lambda: "unused",
        status={"maps_loaded_at": None},
    )


async def ask(server: ChatServer, p: GatePolicy, raw: bytes | None = None) -> GateReply:
    judge = LLMJudge(
        LLMJudgeConfig(
            base_url=server.base_url,
            model="gate-model",
            timeout=5.0,
            retry=RetryPolicy(max_attempts=1),
        )
    )
    try:
        reply = first(p, raw or body())
        assert reply.pending is not None and reply.event is None
        return await finish_gate(reply, judge.judge, time.perf_counter)
    finally:
        await judge.aclose()


async def test_a_failing_llm_verdict_revises_with_its_critique() -> None:
    async with ChatServer() as server:
        server.push(Reply(FAILING))
        reply = await ask(server, policy())
    assert reply.status == 200 and reply.body["decision"] == "revise"
    (finding,) = reply.body["findings"]
    assert finding == {
        "judge": "llm",
        "category": "fabrication:authorization",
        "critique": "says the refund is done; no tool did it",
    }
    assert reply.body["degraded"] is None and reply.body["maps_loaded_at"] is None
    assert reply.event is not None and reply.event.gate is not None
    assert reply.event.gate.decision == "revise" and reply.event.gate.findings[0].judge == "llm"
    (sent,) = server.bodies()  # one request, the proposed message in it, no retry
    assert sent["model"] == "gate-model" and ITEM in json.dumps(sent["messages"])


async def test_a_passing_verdict_keeps_the_deterministic_decision() -> None:
    async with ChatServer() as server:
        server.push(Reply(PASSING), Reply(FAILING))
        ok = await ask(server, policy())
        low = await ask(server, policy(), body(confidence=0.2))  # below 0.5: escalate wins
    assert ok.body["decision"] == "proceed" and ok.body["findings"] == []
    assert low.body["decision"] == "escalate" and low.body["findings"][0]["judge"] == "llm"


@pytest.mark.parametrize(
    ("fallback", "confidence", "decision"),
    [
        ("skip", 0.9, "proceed"),
        ("skip", 0.2, "escalate"),
        ("proceed", 0.2, "proceed"),
        ("revise", 0.9, "revise"),
        ("revise", 0.2, "escalate"),
        ("escalate", 0.9, "escalate"),
    ],
)
async def test_a_slow_llm_times_out_into_the_rules_fallback(
    fallback: str, confidence: float, decision: str
) -> None:
    async with ChatServer(default=Hang(5.0)) as server:
        t0 = time.perf_counter()
        reply = await ask(server, policy(fallback, timeout_ms=250), body(confidence=confidence))
        took = time.perf_counter() - t0
    assert reply.body["decision"] == decision
    assert reply.body["degraded"].startswith("llm timeout after ")
    assert reply.body["degraded"].endswith(f"(budget 250 ms): on_llm_timeout {fallback}")
    assert took < 4.0  # the rule's budget, not the server's 5 s hang, ended the wait
    assert reply.body["latency_ms"] >= 250.0
    assert reply.event is not None and reply.event.gate is not None
    assert reply.event.gate.degraded == reply.body["degraded"]


async def test_an_llm_error_or_no_judge_is_the_fallback_too() -> None:
    async with ChatServer(default=Status(503, "overloaded")) as server:
        reply = await ask(server, policy("escalate"))
    assert reply.body["decision"] == "escalate"
    assert reply.body["degraded"] == "llm error http_503: on_llm_timeout escalate"
    pending = first(policy("revise"), body())
    no_judge = await finish_gate(pending, None, time.perf_counter)
    assert no_judge.body["decision"] == "revise"
    assert no_judge.body["degraded"] == "llm no LLM judge configured: on_llm_timeout revise"


async def test_rules_without_llm_answer_synchronously_and_never_call_it() -> None:
    async with ChatServer(default=Reply(FAILING)) as server:
        reply = first(policy(), body(agent="plain-bot"))
        assert reply.pending is None and reply.event is not None
        assert reply.body["decision"] == "proceed"
        assert await finish_gate(reply, None, time.perf_counter) is reply
        # a deterministic decision already made by the fail mode is not sent to the LLM
        late = first(
            load_policy(
                "version: v\nrules:\n  - threshold: 0.5\n    checks: [llm]\n"
                "    deadline_ms: 0.000001\n",
                "g.yaml",
            ),
            body(),
        )
        assert late.pending is None and late.body["degraded"].startswith("fail open")
    assert server.requests == []


def test_llm_is_off_by_default_and_needs_an_endpoint() -> None:
    default = load_policy("version: v\nrules:\n  - threshold: 0.5\n", "g.yaml")
    assert "llm" not in default.rules[0].checks and not default.rules[0].uses_llm
    settings: Any = Settings(llm_judge_base_url=None)
    assert gate_llm_judge(settings, default) is None
    with pytest.raises(ConfigError, match=r"gate\.yaml: a gate rule lists the 'llm' check"):
        gate_llm_judge(settings, policy())
    judge = gate_llm_judge(
        Settings(llm_judge_base_url="http://127.0.0.1:9/v1"), policy(timeout_ms=700)
    )
    assert judge is not None and judge.config.timeout == 0.7
    assert judge.config.retry.max_attempts == 1


async def test_the_gate_state_closes_the_llm_clients_it_made(tmp_path: Path) -> None:
    """The worker's gate state owns the inline LLM judge's HTTP clients: after an answer went
    through the real loopback server, ``aclose`` (called when the worker stops) closes them."""
    policy_file = tmp_path / "gate.yaml"
    policy_file.write_text(
        "version: v\nrules:\n  - agent: llm-bot\n    threshold: 0.5\n"
        "    checks: [llm]\n    llm_timeout_ms: 3000\n"
    )
    async with ChatServer(default=Reply(PASSING)) as server:
        state = GateState.from_settings(
            Settings(llm_judge_base_url=server.base_url, gate_policy_file=policy_file)
        )
        assert state.llm_judge is not None
        pending = first(state.policy, body())
        reply = await finish_gate(pending, state.llm_judge, time.perf_counter)
        assert reply.body["decision"] == "proceed" and len(server.requests) == 1
        clients = state._owned._clients if state._owned is not None else []
        assert clients and not any(c.is_closed for c in clients)
        await state.aclose()
        assert all(c.is_closed for c in clients)
    plain = GateState.from_settings(Settings(llm_judge_base_url=None))
    await plain.aclose()  # nothing to close
