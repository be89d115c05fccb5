"""The history cache: a request answered with cached history events gets exactly the answer
(and decision event) it gets without the cache, whatever changed in the re-sent history; the
cache is bounded and an invalid history leaves it as it was."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from monitor.core.errors import GateRequestError
from monitor.gate.checks import CheckSet
from monitor.gate.endpoint import GateLimits, GateReply, decide_gate
from monitor.gate.policy import DEFAULT_POLICY
from monitor.gate.request import HistoryCache, parse_gate_request
from monitor.judges.domains import load_domains

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CHECKS = CheckSet(load_domains())


def event(i: int, kind: str, payload: dict[str, Any], cid: str = "c1") -> dict[str, Any]:
    return {
        "schema": "agent-event/v1",
        "event_id": f"h{i}",
        "type": kind,
        "ts": f"2026-01-01T00:00:0{i}+00:00",
        "conversation_id": cid,
        "agent": {"id": "a"},
        kind: payload,
    }


def history(ok: bool = False, cid: str = "c1") -> list[dict[str, Any]]:
    return [
        event(1, "message", {"role": "user", "content": "Cancel order #W2378156 ($348.20)."}, cid),
        event(
            2,
            "message",
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "k1",
                        "name": "cancel_pending_order",
                        "arguments": {"order_id": "#W2378156"},
                    }
                ],
            },
            cid,
        ),
        event(
            3,
            "tool_result",
            {
                "call_id": "k1",
                "name": "cancel_pending_order",
                "ok": ok,
                **({} if ok else {"error": "payment service timeout"}),
            },
            cid,
        ),
    ]


def body(hist: list[dict[str, Any]], cid: str = "c1", **over: Any) -> bytes:
    return json.dumps(
        {
            "conversation_id": cid,
            "agent": {"id": "a"},
            "domain": "airline",
            "confidence": 0.9,
            "content": "Your order #W2378156 has been cancelled; $348.20 will be refunded.",
            "history": hist,
            **over,
        }
    ).encode()


def ask(data: bytes, cache: HistoryCache | None) -> GateReply:
    return decide_gate(
        data,
        limits=GateLimits(1 << 20, 10_000),
        policy=DEFAULT_POLICY,
        maps={},
        checks=CHECKS,
        now=NOW,
        timer=lambda: 1.0,
        started=1.0,
        new_id=lambda: "r1",
        history_cache=cache,
    )


def same(data: bytes, cache: HistoryCache) -> GateReply:
    cached, plain = ask(data, cache), ask(data, None)
    assert (cached.status, cached.body, cached.event) == (plain.status, plain.body, plain.event)
    return cached


def test_cached_and_uncached_answers_are_equal_even_when_the_history_changes() -> None:
    cache = HistoryCache()
    first = same(body(history(ok=False)), cache)
    assert first.body["decision"] == "revise" and cache.misses == 3 and cache.hits == 0
    again = same(body(history(ok=False)), cache)
    assert again.body == first.body and cache.hits == 3 and cache.misses == 3
    # the same conversation re-sends a changed history: the tool call succeeded after all
    fixed = same(body(history(ok=True)), cache)
    assert fixed.body["decision"] == "proceed" and fixed.body["findings"] == []
    assert cache.misses == 4  # only the changed event was validated again
    # and back: the failed result is not served from the entry it replaced
    assert same(body(history(ok=False)), cache).body == first.body
    # one more event appended (after the successful result, which the cache no longer holds:
    # it keeps the conversation's latest request only): the two unchanged events are hits
    longer = [*history(ok=True), event(4, "message", {"role": "user", "content": "thanks"})]
    hits, misses = cache.hits, cache.misses
    same(body(longer), cache)
    assert (cache.hits, cache.misses) == (hits + 2, misses + 2)
    # the same events under another conversation id are validated for that conversation
    same(body(history(ok=True, cid="c2"), cid="c2"), cache)
    assert len(cache) == 4 + 3


def test_the_key_is_the_exact_json_value_types_included() -> None:
    cache = HistoryCache()
    good = history(ok=True)
    parse_gate_request(
        body(good), max_body_bytes=1 << 20, max_content_chars=10_000, history_cache=cache
    )
    # true -> 1: equal in Python (1 == True), but a strict event refuses it
    bad = [*good[:2], {**good[2], "tool_result": {**good[2]["tool_result"], "ok": 1}}]
    for c in (cache, None):
        with pytest.raises(GateRequestError) as err:
            parse_gate_request(
                body(bad), max_body_bytes=1 << 20, max_content_chars=10_000, history_cache=c
            )
        assert err.value.reason == "invalid_history" and "history[2]" in err.value.detail
    # the refused history changed nothing: the valid one is still served from the cache
    hits = cache.hits
    parse_gate_request(
        body(good), max_body_bytes=1 << 20, max_content_chars=10_000, history_cache=cache
    )
    assert cache.hits == hits + 3


def test_the_cache_is_bounded_least_recently_asked_first() -> None:
    cache = HistoryCache(max_events=7)
    for cid in ("c1", "c2", "c3"):
        same(body(history(cid=cid), cid=cid), cache)
    assert len(cache) == 6  # c1 went when c3 came (9 > 7)
    misses = cache.misses
    same(body(history(cid="c3"), cid="c3"), cache)
    assert cache.misses == misses  # c3 cached
    same(body(history(cid="c1"), cid="c1"), cache)
    assert cache.misses == misses + 3  # c1 had been dropped
    big = HistoryCache(max_events=2)
    same(body(history()), big)  # a history larger than the cache is validated, not kept
    assert len(big) == 0
