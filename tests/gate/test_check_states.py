"""The checks' states kept per conversation give the verdicts of the whole run.

On every assistant message of the committed tau2-bench runs (the data of
``test_inline_checks_recorded``), asked about as the gate asks (the conversation up to it,
the message last), :class:`CheckStates` must answer exactly what :func:`verdicts_on` answers
on the whole conversation: when the requests come in order (each extends the state kept),
in reverse order and shuffled with repeats (each rebuilds it), and through the endpoint with
the history cache (the same answers as without either).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic_core import to_json

from monitor.contract.events import AgentEvent
from monitor.gate.checks import CheckSet, CheckStates, verdicts_on
from monitor.gate.endpoint import GateLimits, decide_gate
from monitor.gate.policy import DEFAULT_POLICY
from monitor.gate.request import HistoryCache
from monitor.judges.base import Conversation, Verdict
from monitor.judges.det_base import DeterministicJudge, Fold
from monitor.judges.domains import load_domains
from tests.gate.test_inline_checks_recorded import _conversations

NAMES = DEFAULT_POLICY.rules[0].checks


def _asks() -> list[tuple[Conversation, str, bool]]:
    """(the conversation up to an assistant message, its id, whether it calls tools), per
    conversation in order."""
    out = []
    for _, events in _conversations():
        conv = Conversation.of(events)
        for i, e in enumerate(conv.events):
            if e.message is not None and e.message.role == "assistant":
                upto = Conversation.of(conv.events[: i + 1])
                out.append((upto, e.event_id, bool(e.message.tool_calls)))
    return out


@pytest.fixture(scope="module")
def asks() -> list[tuple[Conversation, str, bool]]:
    return _asks()


def _dicts(answers: list[list[Verdict]]) -> list[list[dict[str, Any]]]:
    return [[v.to_dict() for v in vs] for vs in answers]


@pytest.mark.slow  # ~5 s of orderings: make test, not make check
def test_kept_states_answer_as_the_whole_run_in_any_order(
    asks: list[tuple[Conversation, str, bool]],
) -> None:
    checks = CheckSet(load_domains(None))
    expected = {}
    for conv, item, calls in asks:
        judges = checks.judges(NAMES, conv.domain())
        expected[item] = _dicts([verdicts_on(j, conv, item, calls) for j in judges])
    assert sum(len(vs) for answers in expected.values() for vs in answers) > 1000
    in_order = CheckStates()
    shuffled = [*asks, *asks[::7]]
    random.Random(7).shuffle(shuffled)
    for states, order in ((in_order, asks), (CheckStates(), asks[::-1]), (CheckStates(), shuffled)):
        for conv, item, calls in order:
            judges = checks.judges(NAMES, conv.domain())
            assert _dicts(states.verdicts(judges, conv, item, calls)) == expected[item], item
    longest = {conv.conversation_id: len(conv.events) for conv, _, _ in asks}  # in order
    assert in_order.folded <= 4 * sum(longest.values())  # each event folded once per check
    assert in_order.reused > 3 * in_order.folded


def test_the_states_are_bounded_and_forget_the_oldest_conversation(
    asks: list[tuple[Conversation, str, bool]],
) -> None:
    checks, states = CheckSet(load_domains(None)), CheckStates(max_events=200)
    held = []
    for conv, item, calls in asks[:400]:
        states.verdicts(checks.judges(NAMES, conv.domain()), conv, item, calls)
        held.append(len(states))
    assert max(held) == 200 or 150 < max(held) <= 200  # full, never above the bound
    assert held[-1] < sum(len(conv.events) for conv, _, _ in asks[:400])


class Failing(DeterministicJudge):
    """A check whose fold raises on the second event: the whole run's error verdict."""

    name = "det.failing"

    def fold(self, conversation_id: str) -> Fold:
        judge = self

        class Breaks(Fold):
            n = 0

            def verdicts(self, event: AgentEvent) -> list[Verdict]:
                return []

            def add(self, event: AgentEvent) -> None:
                self.n += 1
                if self.n == 2:
                    raise RuntimeError("broken fold")

        return Breaks(judge, conversation_id)


def test_a_check_that_raises_while_folding_gives_its_error_verdict(
    asks: list[tuple[Conversation, str, bool]],
) -> None:
    conv, item, calls = next(a for a in asks if len(a[0].events) > 3)
    states = CheckStates()
    [got] = states.verdicts((Failing(),), conv, item, calls)
    assert [(v.status, v.error) for v in got] == [("error", "RuntimeError: broken fold")]
    assert got == verdicts_on(Failing(), conv, item, calls)
    assert len(states) == 0  # the conversation's state dropped


def _body(conv: Conversation, item: str) -> bytes:
    *history, message = conv.events
    assert message.event_id == item and message.message is not None
    return to_json(
        {
            "conversation_id": conv.conversation_id,
            "agent": {"id": message.agent.id},
            "content": message.message.content or "",
            "confidence": 0.9,
            "tool_calls": [c.model_dump() for c in message.message.tool_calls],
            "domain": conv.domain(),
            "request_id": item,
            "history": [e.to_dict() for e in history],
        }
    )


def test_the_endpoint_with_kept_states_answers_as_without(
    asks: list[tuple[Conversation, str, bool]],
) -> None:
    """Through ``decide_gate`` with the history cache (the gate process's path): the same
    answers and decision events (time stopped: the checks' deadline is not what is compared)."""
    checks, limits = CheckSet(load_domains(None)), GateLimits(10**7, 10**6)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    cached, states = HistoryCache(), CheckStates()
    findings = 0
    for conv, item, _ in asks[:600]:
        body = _body(conv, item)
        replies = [
            decide_gate(
                body,
                limits=limits,
                policy=DEFAULT_POLICY,
                maps={},
                checks=checks,
                now=now,
                timer=lambda: 0.0,  # a stopped clock: no deadline passes on a busy machine
                started=0.0,
                new_id=lambda: "x",
                history_cache=cache,
                check_states=kept,
            )
            for cache, kept in ((None, None), (cached, states))
        ]
        plain, fast = (r.body for r in replies)
        assert (replies[0].status, plain) == (replies[1].status, fast), item
        assert replies[0].status == 200
        findings += len(plain["findings"])
    assert findings > 20 and states.reused > states.folded
