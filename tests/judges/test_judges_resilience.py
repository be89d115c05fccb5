"""Pure parts of the LLM judge: RetryPolicy, Retry-After, CircuitBreaker, and rubric parsing."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import pytest

from monitor.core.errors import MalformedOutput
from monitor.core.resilience import (
    CircuitBreaker,
    CircuitBreakers,
    RetryPolicy,
    parse_retry_after,
)
from monitor.judges.base import Conversation
from monitor.judges.rubric import (
    MAX_CONTENT_CHARS,
    PROMPT_VERSION,
    REPAIR_INSTRUCTION,
    build_messages,
    parse_output,
    repair_messages,
)
from tests.factories import event
from tests.servers.llm_server import verdicts_json

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


# --- RetryPolicy ---------------------------------------------------------------------------


def test_full_jitter_stays_within_the_exponential_ceiling() -> None:
    policy = RetryPolicy(max_attempts=10, base_delay=0.5, max_delay=4.0)
    assert [policy.backoff_ceiling(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    rng = random.Random(7)
    for retry in range(1, 8):
        delays = [policy.delay(retry, rng.random) for _ in range(2000)]
        ceiling = policy.backoff_ceiling(retry)
        assert all(0.0 <= d < ceiling for d in delays)
        # full jitter: uniform over [0, ceiling), so it reaches both ends of the range
        assert min(delays) < 0.05 * ceiling and max(delays) > 0.95 * ceiling
    assert policy.delay(3, lambda: 0.0) == 0.0
    assert policy.delay(3, lambda: 0.5) == 1.0


def test_retry_after_is_used_as_is_but_capped() -> None:
    policy = RetryPolicy(max_retry_after=30.0)
    assert policy.delay(1, lambda: 0.99, retry_after=7.0) == 7.0
    assert policy.delay(1, lambda: 0.99, retry_after=3600.0) == 30.0
    assert policy.delay(1, lambda: 0.99, retry_after=0.0) == 0.0


def test_attempt_budget_and_validation() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert [policy.should_retry(a) for a in (1, 2, 3)] == [True, True, False]
    assert not RetryPolicy(max_attempts=1).should_retry(1)
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="retry numbers start at 1"):
        policy.backoff_ceiling(0)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("7", 7.0),
        (" 120 ", 120.0),
        ("1.5", 1.5),
        ("-3", 0.0),
        ("Sun, 01 Mar 2026 12:00:42 GMT", 42.0),
        ("Sun, 01 Mar 2026 11:59:00 GMT", 0.0),  # already past
        ("Sunday, 01-Mar-26 12:01:00 GMT", 60.0),  # obsolete RFC 850 form
        (None, None),
        ("", None),
        ("soon", None),
        ("nan", None),
    ],
)
def test_parse_retry_after_seconds_and_http_dates(header: str | None, expected: float) -> None:
    assert parse_retry_after(header, NOW) == expected


# --- CircuitBreaker ------------------------------------------------------------------------


def state(breaker: CircuitBreaker) -> str:
    return breaker.state  # via a function: mypy would narrow the property between asserts


class FakeMonotonic:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_breaker_opens_after_n_consecutive_failures_only() -> None:
    clock = FakeMonotonic()
    b = CircuitBreaker(clock, failure_threshold=3, cool_down=10.0)
    for _ in range(2):
        assert b.allow()
        b.record_failure()
    assert b.allow()
    b.record_success()  # resets the count: failures must be consecutive
    for _ in range(2):
        b.record_failure()
    assert state(b) == "closed"
    b.record_failure()
    assert state(b) == "open"
    assert not b.allow()


def test_breaker_half_opens_after_cool_down_and_closes_on_success() -> None:
    clock = FakeMonotonic()
    b = CircuitBreaker(clock, failure_threshold=2, cool_down=10.0)
    b.record_failure()
    b.record_failure()
    clock.t += 9.99
    assert state(b) == "open" and not b.allow()
    clock.t += 0.01
    assert state(b) == "half_open"
    assert b.allow()  # the single trial call
    assert not b.allow()  # a second one waits while the trial is in flight
    b.record_success()
    assert state(b) == "closed" and b.allow() and b.allow()


def test_breaker_reopens_for_a_full_cool_down_when_the_trial_fails() -> None:
    clock = FakeMonotonic()
    b = CircuitBreaker(clock, failure_threshold=5, cool_down=10.0)
    for _ in range(5):
        b.record_failure()
    clock.t += 10.0
    assert b.allow()
    b.record_failure()  # one failure in half-open is enough
    assert state(b) == "open"
    clock.t += 5.0
    assert not b.allow()
    clock.t += 5.0
    assert state(b) == "half_open"


def test_breaker_release_frees_the_trial_slot_without_changing_state() -> None:
    clock = FakeMonotonic()
    b = CircuitBreaker(clock, failure_threshold=1, cool_down=1.0)
    b.record_failure()
    clock.t += 1.0
    assert b.allow() and not b.allow()
    b.release()
    assert state(b) == "half_open" and b.allow()


def test_breaker_registry_shares_one_breaker_per_endpoint() -> None:
    reg = CircuitBreakers(FakeMonotonic(), failure_threshold=1)
    a = reg.for_endpoint("http://a/v1")
    assert reg.for_endpoint("http://a/v1") is a
    a.record_failure()
    assert reg.for_endpoint("http://b/v1").state == "closed"
    with pytest.raises(ValueError):
        CircuitBreaker(FakeMonotonic(), failure_threshold=0)


# --- rubric --------------------------------------------------------------------------------


def conversation() -> Conversation:
    call = {"id": "k1", "name": "refund", "arguments": {"order_id": "123", "amount": 20}}
    return Conversation.of(
        [
            event("u1", role="user", content="Refund order 123 please", confidence=None, at=0),
            event("a1", content="Refunding.", tool_calls=[call], confidence=0.9, at=1),
            event(
                "t1",
                "c1",
                "tool_result",
                call_id="k1",
                name="refund",
                ok=False,
                at=2,
                content=None,
                error="order not refundable",
            ),
            event("a2", content="Done, $20 refunded! " + "x" * 3000, confidence=0.95, at=3),
            event("o1", "c1", "outcome", success=False, at=9),
        ]
    )


def test_prompt_renders_items_tool_calls_results_and_truncates() -> None:
    system, user = build_messages(conversation())
    assert system["role"] == "system" and user["role"] == "user"
    assert PROMPT_VERSION == "rubric-v1"
    text = user["content"]
    assert "[item a1] assistant (stated confidence 0.90): Refunding." in text
    assert 'tool call k1 refund({"order_id":"123","amount":20})' in text
    assert "tool result k1 refund [ERROR]: order not refundable" in text
    assert "user: Refund order 123 please" in text
    assert "[item a2]" in text and "…[truncated 1020 chars]" in text
    assert "x" * (MAX_CONTENT_CHARS + 1) not in text
    assert "outcome" not in text  # the ground truth is never shown to the judge
    assert text.endswith("Grade these item ids: a1, a2")
    assert build_messages(conversation()) == [system, user]  # deterministic


def test_parse_well_formed_output_into_verdicts() -> None:
    out = verdicts_json(
        {
            "item_id": "a2",
            "correctness": 0.1,
            "informativeness": 0.6,
            "consistency": 0.2,
            "label": 0,
            "categories": ["wrong_information"],
            "fabrication_type": "authorization",
            "rationale": "claims a refund the tool refused",
        },
        {"item_id": "a1", "label": 1},
    )
    v1, v2 = parse_output(f"```json\n{out}\n```", conversation(), judge="j", judge_version="m/r")
    assert (v1.item_id, v1.label, v1.score, v1.categories) == ("a1", 1, 1.0, ())
    assert (v2.item_id, v2.label, v2.score) == ("a2", 0, 0.1)
    assert v2.categories == ("wrong_information", "fabrication", "fabrication:authorization")
    assert v2.evidence == {
        "correctness": 0.1,
        "informativeness": 0.6,
        "consistency": 0.2,
        "fabrication_type": "authorization",
    }
    assert v2.rationale == "claims a refund the tool refused"
    assert (v2.judge, v2.judge_version, v2.conversation_id, v2.status) == ("j", "m/r", "c1", "ok")


def test_json_is_found_in_prose_and_fences() -> None:
    out = verdicts_json({"item_id": "a1"}, {"item_id": "a2"})
    for text in (out, f"Here you go:\n{out}\nHope it helps", f"```\n{out}\n```", f" {out} "):
        assert [v.item_id for v in parse_output(text, conversation())] == ["a1", "a2"]


def bad(text: str) -> MalformedOutput:
    with pytest.raises(MalformedOutput) as info:
        parse_output(text, conversation())
    return info.value


def test_malformed_outputs_are_rejected_with_a_reason() -> None:
    ok = {"item_id": "a1"}
    assert bad("I think it is fine").reason == "no_json"
    assert bad("").reason == "no_json"
    assert bad('{"items": [').reason == "no_json"
    e = bad(verdicts_json(ok, {"item_id": "zz"}))
    assert e.reason == "unknown_item" and "'zz'" in e.detail
    e = bad(verdicts_json(ok, {"item_id": "a2", "correctness": 1.5}))
    assert e.reason == "invalid" and "items.1.correctness" in e.detail and "1" in e.detail
    e = bad(verdicts_json(ok, {"item_id": "a2", "categories": ["rudeness"]}))
    assert e.reason == "invalid" and "items.1.categories.0" in e.detail
    e = bad(verdicts_json(ok, {"item_id": "a2", "fabrication_type": "weather"}))
    assert e.reason == "invalid" and "fabrication_type" in e.detail
    assert bad(verdicts_json(ok, {"item_id": "a2", "label": 2})).reason == "invalid"
    assert bad(verdicts_json(ok, {"item_id": "a2", "label": True})).reason == "invalid"
    assert bad(verdicts_json(ok, {"item_id": "a2", "consistency": "high"})).reason == "invalid"
    assert bad(json.dumps({"verdicts": []})).reason == "invalid"
    assert bad(verdicts_json(ok, ok, {"item_id": "a2"})).reason == "duplicate_item"
    e = bad(verdicts_json(ok))
    assert e.reason == "missing_item" and "a2" in e.detail


def test_repair_messages_feed_back_the_bad_reply_and_the_reason() -> None:
    original = build_messages(conversation())
    err = MalformedOutput("unknown_item", "item_id 'zz' is not one of the item ids")
    msgs = repair_messages(original, "oops", err)
    assert msgs[:2] == original
    assert msgs[2] == {"role": "assistant", "content": "oops"}
    assert msgs[3]["role"] == "user"
    assert msgs[3]["content"].startswith(REPAIR_INSTRUCTION)
    assert "item_id 'zz'" in msgs[3]["content"]
    assert original == build_messages(conversation())  # not mutated
