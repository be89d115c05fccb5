"""Grouping of notifications that fire together. Pure, explicit times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from monitor.alerts.grouping import (
    Group,
    GroupedNotification,
    GroupingPolicy,
    step,
)
from monitor.alerts.lifecycle import Observation, evaluate
from monitor.alerts.rules import Rule, default_rules
from monitor.alerts.states import AlertState, Kind, Notification

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
POLICY = GroupingPolicy(("severity", "agent"), timedelta(seconds=30), timedelta(minutes=5))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def make_rule(name: str, severity: str = "critical") -> Rule:
    return Rule.model_validate(
        {
            "name": name,
            "metric": "ece",
            "comparison": ">",
            "threshold": 0.05,
            "window": "1h",
            "min_samples": 0,
            "severity": severity,
            "annotations": {"summary": f"{name} for {{agent}}"},
        }
    )


class Alerts:
    """Evaluates several (rule, agent) alerts and returns their notifications."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, str], AlertState] = {}
        self.rules: dict[str, Rule] = {}

    def feed(self, name: str, agent: str, value: float, seconds: float, **kw: Any) -> Notification:
        r = self.rules.setdefault(name, make_rule(name, **kw))
        o = Observation(name, {"agent": agent}, value, 10, at(seconds))
        self.states[(name, agent)], [n] = evaluate(
            r, self.states.get((name, agent)), o, at(seconds)
        )
        return n


def test_alerts_firing_together_are_sent_as_one_after_group_wait() -> None:
    a = Alerts()
    n1 = a.feed("ece", "billing", 0.2, 0)
    r = step({}, [n1], POLICY, at(0))
    assert r.ready == [] and r.groups["severity=critical,agent=billing"].pending == (n1,)
    n2 = a.feed("mce", "billing", 0.9, 10)
    n3 = a.feed("ece", "support", 0.2, 10)
    r = step(r.groups, [n2, n3], POLICY, at(10))
    assert r.ready == []
    r = step(r.groups, [], POLICY, at(29))
    assert r.ready == []
    r = step(r.groups, [], POLICY, at(30))
    [batch] = r.ready  # billing is due (30 s after its first); support is not (started at 10)
    assert batch.group_key == "severity=critical,agent=billing"
    assert batch.notifications == (n1, n2) and dict(batch.labels) == {
        "severity": "critical",
        "agent": "billing",
    }
    assert batch.created_at == at(30) and batch.severity == "critical"
    r = step(r.groups, [], POLICY, at(40))
    assert [b.notifications for b in r.ready] == [(n3,)]


def test_later_batches_wait_group_interval_and_idle_groups_are_forgotten() -> None:
    a = Alerts()
    r = step({}, [a.feed("ece", "billing", 0.2, 0)], POLICY, at(30))  # wait 0 s after at(30)?
    assert r.ready == []  # first pending at 30, due at 60
    r = step(r.groups, [], POLICY, at(60))
    assert len(r.ready) == 1
    late = a.feed("mce", "billing", 0.9, 70)
    r = step(r.groups, [late], POLICY, at(70))
    assert r.ready == []
    r = step(r.groups, [], POLICY, at(359))
    assert r.ready == []
    r = step(r.groups, [], POLICY, at(360))  # 5 min after the last flush
    assert [b.notifications for b in r.ready] == [(late,)]
    r = step(r.groups, [], POLICY, at(660))
    assert r.groups == {}  # idle for a whole interval
    fresh = a.feed("brier", "billing", 0.9, 700)
    r = step(r.groups, [fresh], POLICY, at(700))
    r = step(r.groups, [], POLICY, at(730))  # a first batch again: group_wait, not interval
    assert [b.notifications for b in r.ready] == [(fresh,)]


def test_zero_group_wait_sends_immediately() -> None:
    a = Alerts()
    n = a.feed("ece", "billing", 0.2, 0)
    r = step({}, [n], GroupingPolicy(group_wait=timedelta(0)), at(0))
    assert [b.notifications for b in r.ready] == [(n,)]


def test_firing_then_resolved_before_the_first_flush_cancel_out() -> None:
    a = Alerts()
    fired = a.feed("ece", "billing", 0.2, 0)
    resolved = a.feed("ece", "billing", 0.0, 10)
    assert resolved.kind is Kind.RESOLVED
    r = step({}, [fired, resolved], POLICY, at(10))
    assert r.superseded == [fired, resolved]
    r = step(r.groups, [], POLICY, at(100))
    assert r.ready == []


def test_resolved_supersedes_a_pending_repeat_and_repeats_do_not_pile_up() -> None:
    a = Alerts()
    fired = a.feed("ece", "billing", 0.2, 0)
    r = step({}, [fired], POLICY, at(30))
    r = step(r.groups, [], POLICY, at(60))
    assert len(r.ready) == 1
    rep = a.feed("ece", "billing", 0.3, 4 * 3600)
    rep2 = a.feed("ece", "billing", 0.3, 8 * 3600)
    assert (rep.kind, rep2.kind) == (Kind.REPEAT, Kind.REPEAT)
    r = step({}, [rep, rep2], POLICY, at(8 * 3600))
    assert r.superseded == [rep2]
    resolved = a.feed("ece", "billing", 0.0, 8 * 3600 + 1)
    r = step(r.groups, [resolved, resolved], POLICY, at(8 * 3600 + 1))  # retried twice
    assert r.superseded == [rep]
    r = step(r.groups, [], POLICY, at(9 * 3600))
    [batch] = r.ready
    assert batch.notifications == (resolved,)
    assert batch.resolved == (resolved,) and batch.firing == ()


def test_group_key_uses_configured_labels_and_batch_keys_are_stable() -> None:
    a = Alerts()
    n1 = a.feed("ece", "billing", 0.2, 0, severity="warning")
    n2 = a.feed("mce", "support", 0.9, 0, severity="warning")
    by_severity = GroupingPolicy(("severity",), timedelta(0), timedelta(minutes=1))
    [batch] = step({}, [n1, n2], by_severity, at(0)).ready
    assert batch.group_key == "severity=warning" and batch.notifications == (n1, n2)
    [again] = step({}, [n2, n1], by_severity, at(5)).ready
    assert again.idempotency_key == batch.idempotency_key  # same members, same key
    assert batch.idempotency_key.startswith("group:")
    assert GroupingPolicy(("team",)).key({"agent": "x"}) == ("team=", {"team": ""})


def test_groups_round_trip_and_policy_from_rules() -> None:
    a = Alerts()
    r = step({}, [a.feed("ece", "billing", 0.2, 0)], POLICY, at(0))
    g = r.groups["severity=critical,agent=billing"]
    assert Group.from_dict(g.to_dict()) == g
    [batch] = step(r.groups, [], POLICY, at(30)).ready
    assert GroupedNotification.from_dict(batch.to_dict()) == batch
    policy = GroupingPolicy.from_rules(default_rules())
    assert policy == GroupingPolicy(
        ("severity", "agent"), timedelta(seconds=30), timedelta(minutes=5)
    )
    with pytest.raises(ValueError, match="group_interval"):
        GroupingPolicy(group_interval=timedelta(0))
