"""LLMJudge against a real chat-completions HTTP server on loopback
(tests/servers/llm_server.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from monitor.core.clock import FixedClock
from monitor.core.resilience import RetryPolicy
from monitor.judges.base import Conversation
from monitor.judges.llm import LLMJudge, LLMJudgeConfig
from monitor.judges.rubric import REPAIR_INSTRUCTION, build_messages
from tests.factories import event
from tests.servers.llm_server import ChatServer, Hang, Recorded, Reply, Status, verdicts_json

KEY = "sk-test-SECRET-0123456789"
GOOD = verdicts_json(
    {"item_id": "a1", "label": 1},
    {
        "item_id": "a2",
        "correctness": 0.2,
        "informativeness": 0.5,
        "consistency": 0.3,
        "label": 0,
        "categories": ["fabrication"],
        "fabrication_type": "authorization",
        "rationale": "says the refund went through; the tool said no",
    },
    {"item_id": "a3", "label": 1},
)


def conversation(cid: str = "c1") -> Conversation:
    call = {"id": "k1", "name": "refund", "arguments": {"order_id": "123"}}
    return Conversation.of(
        [
            event("u1", cid, role="user", content="Refund order 123", confidence=None, at=0),
            event("a1", cid, content="On it.", tool_calls=[call], confidence=0.9, at=1),
            event(
                "t1",
                cid,
                "tool_result",
                call_id="k1",
                name="refund",
                ok=False,
                at=2,
                content=None,
                error="not refundable",
            ),
            event("a2", cid, content="Your refund was issued.", confidence=0.95, at=3),
            event("a3", cid, content="Anything else?", confidence=None, at=4),
        ]
    )


class FakeSleep:  # records backoff delays instead of waiting
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
async def server() -> AsyncIterator[ChatServer]:
    async with ChatServer() as s:
        yield s


@pytest.fixture
def sleep() -> FakeSleep:
    return FakeSleep()


def make_judge(server: ChatServer, sleep: FakeSleep, **overrides: Any) -> LLMJudge:
    clock = overrides.pop("clock", None)
    retry = RetryPolicy(max_attempts=3, base_delay=1.0, max_delay=8.0)
    settings: dict[str, Any] = {"model": "judge-model", "api_key": KEY, "timeout": 5.0}
    settings |= {"retry": retry, "base_url": server.base_url, **overrides}
    return LLMJudge(LLMJudgeConfig(**settings), sleep=sleep, rand=lambda: 0.5, clock=clock)


def assert_no_key(judge_output: Any, caplog: pytest.LogCaptureFixture) -> None:
    assert KEY not in json.dumps([v.to_dict() for v in judge_output])
    assert all(KEY not in r.getMessage() for r in caplog.records)


async def test_well_formed_reply_gives_verdicts_and_a_proper_request(
    server: ChatServer, sleep: FakeSleep
) -> None:
    server.push(Reply(f"```json\n{GOOD}\n```"))
    async with make_judge(server, sleep) as judge:
        verdicts = await judge.judge(conversation())
    assert [(v.item_id, v.status, v.label, v.score) for v in verdicts] == [
        ("a1", "ok", 1, 1.0),
        ("a2", "ok", 0, 0.2),
        ("a3", "ok", 1, 1.0),
    ]
    a2 = verdicts[1]
    assert a2.categories == ("fabrication", "fabrication:authorization")
    assert a2.rationale == "says the refund went through; the tool said no"
    assert a2.evidence["informativeness"] == 0.5 and a2.evidence["attempts"] == 1
    assert all(v.judge == "llm" and v.judge_version == "judge-model/rubric-v1" for v in verdicts)
    assert all(v.latency_ms > 0 for v in verdicts)
    (req,) = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["Authorization"] == f"Bearer {KEY}"
    assert req.body == {
        "model": "judge-model",
        "messages": build_messages(conversation()),
        "temperature": 0,
        "response_format": {"type": "json_object"},
    }
    assert sleep.delays == []


async def test_json_mode_off_and_no_key(server: ChatServer, sleep: FakeSleep) -> None:
    server.push(Reply(GOOD))
    async with make_judge(server, sleep, api_key=None, json_mode=False, max_tokens=512) as judge:
        verdicts = await judge.judge(conversation())
    assert [v.status for v in verdicts] == ["ok"] * 3
    (req,) = server.requests
    assert "Authorization" not in req.headers
    assert "response_format" not in req.body and req.body["max_tokens"] == 512


async def test_malformed_then_repaired(server: ChatServer, sleep: FakeSleep) -> None:
    server.push(Reply("Sure! The first message is fine."), Reply(GOOD))
    async with make_judge(server, sleep) as judge:
        verdicts = await judge.judge(conversation())
    assert [v.label for v in verdicts] == [1, 0, 1]
    assert all(v.status == "ok" and v.evidence["repaired"] for v in verdicts)
    assert len(server.requests) == 2
    first, second = (r.body["messages"] for r in server.requests)
    assert second[: len(first)] == first
    assert second[-2] == {"role": "assistant", "content": "Sure! The first message is fine."}
    assert second[-1]["content"].startswith(REPAIR_INSTRUCTION)
    assert "no JSON object" in second[-1]["content"]


async def test_malformed_twice_gives_error_verdicts(
    server: ChatServer, sleep: FakeSleep, caplog: pytest.LogCaptureFixture
) -> None:
    bad_item = verdicts_json({"item_id": "a1"}, {"item_id": "a2"}, {"item_id": "nope"})
    server.push(Reply(bad_item), Reply(f"{KEY} is all I say"))
    async with make_judge(server, sleep) as judge:
        verdicts = await judge.judge(conversation())
    assert len(server.requests) == 2
    assert "'nope'" in server.requests[1].body["messages"][-1]["content"]
    # one error verdict per assistant message with a confidence (a3 has none)
    assert [(v.item_id, v.status, v.error) for v in verdicts] == [
        ("a1", "error", "malformed_output"),
        ("a2", "error", "malformed_output"),
    ]
    assert verdicts[0].evidence["attempts"] == 2 and verdicts[0].label is None
    assert "[redacted] is all I say" in verdicts[0].evidence["detail"]
    assert_no_key(verdicts, caplog)


@pytest.mark.parametrize("form", ["seconds", "http-date"])
async def test_429_honours_retry_after(server: ChatServer, sleep: FakeSleep, form: str) -> None:
    clock = FixedClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    value = "7" if form == "seconds" else format_datetime(clock.now() + timedelta(seconds=7), True)
    server.push(Status(429, "slow down", {"Retry-After": value}), Reply(GOOD))
    async with make_judge(server, sleep, clock=clock) as judge:
        verdicts = await judge.judge(conversation())
    assert sleep.delays == [7.0]
    assert len(server.requests) == 2
    assert [v.status for v in verdicts] == ["ok"] * 3 and verdicts[0].evidence["attempts"] == 2


async def test_5xx_are_retried_with_jittered_backoff(server: ChatServer, sleep: FakeSleep) -> None:
    server.push(Status(500), Status(503), Reply(GOOD))
    async with make_judge(server, sleep) as judge:
        verdicts = await judge.judge(conversation())
    assert [v.status for v in verdicts] == ["ok"] * 3
    assert len(server.requests) == 3
    assert sleep.delays == [0.5, 1.0]  # rand() = 0.5 times the ceilings 1 s and 2 s


async def test_5xx_until_the_budget_is_spent(server: ChatServer, sleep: FakeSleep) -> None:
    server.push(Status(502), Status(500), Status(503, f"upstream said {KEY}"))
    async with make_judge(server, sleep) as judge:
        verdicts = await judge.judge(conversation())
    assert {(v.error, v.evidence["attempts"]) for v in verdicts} == {("http_503", 3)}
    assert "[redacted]" in verdicts[0].evidence["detail"]
    assert len(server.requests) == 3 and len(sleep.delays) == 2


async def test_timeout_is_retried_then_an_error_verdict(
    server: ChatServer, sleep: FakeSleep
) -> None:
    server.push(Hang(5.0), Hang(5.0))
    retry = RetryPolicy(max_attempts=2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with make_judge(server, sleep, timeout=0.2, retry=retry) as judge:
        verdicts = await judge.judge(conversation())
    assert loop.time() - started < 2.0  # two real 0.2 s timeouts, not the 5 s hangs
    assert [(v.item_id, v.error) for v in verdicts] == [("a1", "timeout"), ("a2", "timeout")]
    assert len(server.requests) == 2 and len(sleep.delays) == 1
    assert verdicts[0].latency_ms >= 400


@pytest.mark.parametrize("status", [400, 401, 404])
async def test_other_4xx_fail_at_once(
    server: ChatServer, sleep: FakeSleep, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    server.push(Status(status, json.dumps({"error": {"message": f"bad key {KEY}"}})))
    async with make_judge(server, sleep) as judge:
        verdicts = await judge.judge(conversation())
    assert len(server.requests) == 1 and sleep.delays == []
    assert {v.error for v in verdicts} == {f"http_{status}"}
    assert f"HTTP {status}" in verdicts[0].evidence["detail"]
    assert_no_key(verdicts, caplog)


async def test_not_a_chat_completion(server: ChatServer, sleep: FakeSleep) -> None:
    server.push(Reply(None, raw="<html>gateway</html>"))
    async with make_judge(server, sleep) as judge:
        verdicts = await judge.judge(conversation())
    assert {v.error for v in verdicts} == {"bad_response"} and len(server.requests) == 1


async def test_connection_refused(sleep: FakeSleep) -> None:
    async with ChatServer() as gone:
        pass  # its port is free again: nothing listens there
    async with make_judge(gone, sleep) as judge:
        verdicts = await judge.judge(conversation())
    assert {(v.error, v.evidence["attempts"]) for v in verdicts} == {("connection_error", 3)}


async def test_conversation_level_error_and_nothing_to_judge(
    server: ChatServer, sleep: FakeSleep
) -> None:
    server.push(Status(401))
    no_conf = Conversation.of([event("a9", "c9", content="hi", confidence=None)])
    no_assistant = Conversation.of([event("u9", "c9", role="user", confidence=None)])
    async with make_judge(server, sleep) as judge:
        (verdict,) = await judge.judge(no_conf)
        assert await judge.judge(no_assistant) == []
    assert (verdict.item_id, verdict.conversation_id, verdict.error) == (None, "c9", "http_401")
    assert len(server.requests) == 1


async def test_circuit_breaker_opens_half_opens_and_closes(
    server: ChatServer, sleep: FakeSleep
) -> None:
    clock = FixedClock(datetime(2026, 3, 1, tzinfo=UTC))
    settings = {"retry": RetryPolicy(max_attempts=2), "breaker_threshold": 3}
    server.default = Status(500)
    async with make_judge(server, sleep, clock=clock, breaker_cool_down=30, **settings) as judge:
        first = await judge.judge(conversation())  # 2 failed attempts
        second = await judge.judge(conversation())  # 3rd failure opens: no 4th attempt
        assert [v.error for v in first + second] == ["http_500"] * 4
        assert [v.evidence["attempts"] for v in first + second] == [2, 2, 1, 1]
        assert len(server.requests) == 3 and str(judge.breaker.state) == "open"
        assert {v.error for v in await judge.judge(conversation())} == {"circuit_open"}
        assert len(server.requests) == 3  # fail fast: nothing reached the server

        clock.advance(30)  # cool-down over: one trial call, which fails -> open again
        trial = await judge.judge(conversation())
        assert {(v.error, v.evidence["attempts"]) for v in trial} == {("http_500", 1)}
        assert len(server.requests) == 4 and str(judge.breaker.state) == "open"
        assert {v.error for v in await judge.judge(conversation())} == {"circuit_open"}
        assert len(server.requests) == 4

        clock.advance(30)
        server.default = Reply(GOOD)
        verdicts = await judge.judge(conversation())
        assert [v.status for v in verdicts] == ["ok"] * 3
        assert len(server.requests) == 5 and str(judge.breaker.state) == "closed"


@pytest.mark.parametrize("injected", [True, False])
async def test_concurrency_is_bounded(server: ChatServer, sleep: FakeSleep, injected: bool) -> None:
    server.default = Reply(GOOD, delay=0.1)
    config = LLMJudgeConfig(base_url=server.base_url, model="m", max_concurrency=10)
    async with httpx.AsyncClient() as client:  # its own pool allows 100: the judge must limit
        async with LLMJudge(config, client=client if injected else None, sleep=sleep) as judge:
            calls = (judge.judge(conversation(f"c{i}")) for i in range(25))
            results = await asyncio.gather(*calls)  # owned: 2 pools of 5, both used to the full
        assert not client.is_closed  # an injected client belongs to the caller
    assert all(v.status == "ok" for r in results for v in r)
    assert [r[0].conversation_id for r in results] == [f"c{i}" for i in range(25)]
    assert len(server.requests) == 25
    assert server.max_in_flight == 10


async def test_key_echoed_by_the_server_never_reaches_verdicts(
    server: ChatServer, sleep: FakeSleep, caplog: pytest.LogCaptureFixture
) -> None:
    def echo(req: Recorded) -> Reply:
        leak = req.headers.get("Authorization", "")
        return Reply(
            verdicts_json(*({"item_id": i, "rationale": leak} for i in ("a1", "a2", "a3")))
        )

    server.default = echo
    caplog.set_level(logging.DEBUG)
    async with make_judge(server, sleep) as judge:
        verdicts = await judge.judge(conversation())
    assert verdicts[0].rationale == "Bearer [redacted]"
    assert_no_key(verdicts, caplog)
    assert KEY not in repr(judge.config)
