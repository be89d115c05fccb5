"""Silences with expiry and their effect on the alert lifecycle."""

from __future__ import annotations

import pytest

from monitor.alerts.silences import Matcher, Silence, parse_matchers
from monitor.alerts.states import Kind, Status
from tests.alerts.test_alert_lifecycle import Run, at, rule


def silence(start: float, end: float, matchers: str = "alertname=ece_*,agent=billing") -> Silence:
    return Silence("s1", parse_matchers(matchers), at(start), at(end), "deploy", "carol")


def test_silence_changes_state_but_emits_nothing_and_owes_a_page_on_expiry() -> None:
    run = Run(rule(**{"for": "0s"}), silences=(silence(0, 30),))
    assert run.feed(0.2, 0) == [] and run.status() is Status.FIRING
    assert run.state is not None and run.state.silenced
    assert run.feed(0.2, 29) == []
    [n] = run.feed(0.2, 30)  # silence ended: the page that was held back
    assert n.kind is Kind.FIRING and n.sequence == 0 and n.created_at == at(30)
    assert run.feed(0.0, 31)[0].kind is Kind.RESOLVED


def test_silence_during_firing_then_expiry_refires_with_new_key() -> None:
    run = Run(rule(**{"for": "0s"}), silences=(silence(10, 20),))
    [first] = run.feed(0.2, 0)
    assert run.feed(0.2, 15) == []
    [again] = run.feed(0.2, 25)
    assert again.kind is Kind.FIRING and again.sequence == 1
    assert again.idempotency_key != first.idempotency_key


def test_resolved_while_silenced_is_not_sent_and_unmatched_silence_is_ignored() -> None:
    run = Run(rule(**{"for": "0s"}), silences=(silence(5, 50),))
    run.feed(0.2, 0)
    assert run.feed(0.0, 10) == [] and run.status() is Status.RESOLVED
    other = Run(rule(**{"for": "0s"}), silences=(silence(0, 50, "agent=support"),))
    assert len(other.feed(0.2, 0)) == 1


def test_fired_under_silence_and_resolved_under_silence_sends_nothing() -> None:
    run = Run(rule(**{"for": "0s"}), silences=(silence(0, 50),))
    run.feed(0.2, 0)
    run.feed(0.0, 10)
    assert run.sent == [] and run.status() is Status.RESOLVED


def test_silence_matching_and_expire() -> None:
    s = silence(0, 60)
    labels = {"alertname": "ece_tier3", "agent": "billing", "severity": "critical"}
    assert s.matches(labels, at(0)) and not s.matches(labels, at(60))
    assert not s.matches({**labels, "agent": "support"}, at(1))
    assert not s.matches({"alertname": "ece_tier3"}, at(1))  # agent label missing
    assert Matcher("agent", "*").matches({})
    ended = s.expire(at(10))
    assert ended.ends_at == at(10) and not ended.matches(labels, at(10))
    future = silence(100, 200).expire(at(10))
    assert future.ends_at == future.starts_at and not future.active(at(100))
    assert Silence.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError, match="reason"):
        Silence("x", s.matchers, at(0), at(1), " ", "me")
    with pytest.raises(ValueError, match="before"):
        Silence("x", s.matchers, at(1), at(0), "r", "me")
    with pytest.raises(ValueError, match="label=glob"):
        parse_matchers("agent")
