"""``deadline_ms`` measures the inline checks' own time: a request that waited before its
checks ran (reading the body, the event loop busy elsewhere) is still decided by the checks,
and its ``latency_ms`` shows the wait; checks that themselves run past it use the fail mode."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from monitor.gate.checks import CheckSet
from monitor.gate.decide import decide
from monitor.gate.policy import GatePolicy, GateRule
from monitor.gate.request import parse_gate_request
from monitor.judges.base import Conversation, Verdict

NOW = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = GatePolicy(version="p", rules=(GateRule(threshold=0.5, deadline_ms=50),))
BODY = json.dumps(
    {"conversation_id": "c1", "agent": {"id": "a"}, "content": "ok", "confidence": 0.2}
).encode()


class Clock:
    """A fake monotonic clock that the slow judge below advances."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class SlowCheck:
    name, version, applies_to = "acme.slow", "1", "all"

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def judge(self, conversation: Conversation) -> list[Verdict]:
        self.clock.t += self.seconds
        return []


def checks(clock: Clock, seconds: float) -> CheckSet:
    out = CheckSet()
    out._cache[(POLICY.rules[0].checks, None)] = (SlowCheck(clock, seconds),)
    return out


def test_time_before_the_checks_is_latency_not_a_missed_deadline() -> None:
    req = parse_gate_request(BODY, max_body_bytes=4096, max_content_chars=100)
    clock = Clock()
    waited = decide(
        req,
        POLICY,
        {},
        checks(clock, 0.001),
        event_id="gate:1",
        now=NOW,
        timer=clock,
        started=clock.t - 2.0,
    )  # 2 s queued before
    assert waited.payload.degraded is None
    assert waited.payload.decision == "escalate"  # the threshold decided, not the fail mode
    assert waited.payload.latency_ms >= 2000.0
    slow = decide(
        req,
        POLICY,
        {},
        checks(clock, 0.08),
        event_id="gate:2",
        now=NOW,
        timer=clock,
        started=clock.t,
    )
    assert slow.payload.decision == "proceed"  # fail open
    assert slow.payload.degraded == "fail open: checks took 80.0 ms, deadline 50 ms"
