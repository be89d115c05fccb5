"""Alert lifecycle: transitions, for, min_samples, dedup keys, repeat, ack,
silences with expiry. Pure, explicit times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.alerts.lifecycle import Observation, acknowledge, evaluate
from monitor.alerts.rules import Rule
from monitor.alerts.silences import Ack, Silence
from monitor.alerts.states import AlertState, Kind, Notification, Status, fingerprint

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SCOPE = {"agent": "billing", "tier": "3"}


def rule(**over: Any) -> Rule:
    spec: dict[str, Any] = {
        "name": "ece_tier3",
        "metric": "ece",
        "scope": {"tier": 3},
        "comparison": ">",
        "threshold": 0.05,
        "window": "1h",
        "for": "5m",
        "min_samples": 100,
        "severity": "critical",
        "labels": {"team": "payments"},
        "annotations": {
            "summary": "ECE {value} above {threshold} for {agent} on {samples} items",
            "runbook_url": "docs/runbooks.md#calibration-error",
        },
        "repeat_interval": "1h",
    }
    spec.update(over)
    return Rule.model_validate(spec)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def obs(value: float | None, minutes: float, samples: float = 500, **kw: Any) -> Observation:
    return Observation("ece_tier3", SCOPE, value, samples, at(minutes), **kw)


class Run:
    """Feeds observations through ``evaluate`` and records every notification."""

    def __init__(self, r: Rule, silences: tuple[Silence, ...] = ()) -> None:
        self.rule = r
        self.state: AlertState | None = None
        self.sent: list[Notification] = []
        self.silences = silences

    def feed(self, value: float | None, minutes: float, samples: float = 500) -> list[Notification]:
        self.state, out = evaluate(
            self.rule, self.state, obs(value, minutes, samples), at(minutes), self.silences
        )
        self.sent.extend(out)
        return out

    def status(self) -> Status:
        assert self.state is not None
        return self.state.status


def test_full_lifecycle_with_for_duration() -> None:
    run = Run(rule())
    assert run.feed(0.01, 0) == [] and run.status() is Status.INACTIVE
    assert run.feed(0.09, 1) == [] and run.status() is Status.PENDING
    assert run.feed(0.09, 5.5) == [] and run.status() is Status.PENDING  # 4.5 min < 5 min
    [firing] = run.feed(0.10, 6)  # breach lasted 5 min since minute 1
    assert run.status() is Status.FIRING
    assert firing.kind is Kind.FIRING and firing.sequence == 0
    fp = fingerprint("ece_tier3", SCOPE)
    assert firing.fingerprint == fp
    assert firing.idempotency_key == f"{fp}:{at(6).isoformat()}:firing:0"
    assert firing.summary == "ECE 0.1 above 0.05 for billing on 500 items"
    assert firing.value == 0.10 and firing.threshold == 0.05 and firing.samples == 500
    assert firing.window == "1h" and firing.comparison == ">"
    assert dict(firing.labels) == {
        "alertname": "ece_tier3",
        "severity": "critical",
        "metric": "ece",
        "agent": "billing",
        "tier": "3",
        "team": "payments",
    }
    assert run.feed(0.10, 7) == []  # still firing, no duplicate
    [resolved] = run.feed(0.02, 8)
    assert run.status() is Status.RESOLVED
    assert resolved.kind is Kind.RESOLVED and resolved.value == 0.02
    assert resolved.resolved_at == at(8) and resolved.fired_at == at(6)
    # it says what resolved it, not the firing wording ("0.02 above 0.05")
    assert resolved.summary == "ECE 0.02, back under 0.05 for billing (tier 3) after 2 min firing"
    assert resolved.episode == firing.episode
    assert run.feed(0.02, 9) == [] and run.status() is Status.RESOLVED
    # a new breach is a new episode with new keys
    run.feed(0.2, 10)
    assert run.status() is Status.PENDING
    [again] = run.feed(0.2, 15)
    assert (
        again.kind is Kind.FIRING and again.idempotency_key == f"{fp}:{at(15).isoformat()}:firing:0"
    )
    assert len({n.idempotency_key for n in run.sent}) == len(run.sent) == 3


def test_pending_that_recovers_never_fires() -> None:
    run = Run(rule())
    run.feed(0.2, 0)
    run.feed(0.2, 4)
    assert run.feed(0.01, 4.5) == [] and run.status() is Status.INACTIVE
    run.feed(0.2, 5)  # the `for` clock restarts
    assert run.feed(0.2, 9) == [] and run.status() is Status.PENDING
    assert len(run.feed(0.2, 10)) == 1


def test_zero_for_fires_at_once_and_comparisons() -> None:
    run = Run(rule(**{"for": "0s", "comparison": "<", "metric": "accuracy", "threshold": 0.8}))
    [n] = run.feed(0.7, 0)
    assert n.kind is Kind.FIRING and run.status() is Status.FIRING
    assert run.feed(0.8, 1)[0].kind is Kind.RESOLVED  # 0.8 < 0.8 is false


def test_min_samples_breach_is_no_data() -> None:
    run = Run(rule(**{"for": "0s"}))
    assert run.feed(0.5, 0, samples=99) == [] and run.status() is Status.INACTIVE
    assert run.feed(0.5, 1, samples=100)[0].kind is Kind.FIRING
    # a recovery on too few samples does not resolve either
    assert run.feed(0.0, 2, samples=10) == [] and run.status() is Status.FIRING
    assert run.state is not None and run.state.last_value == 0.5  # thin data not recorded
    assert run.feed(None, 3) == [] and run.status() is Status.FIRING
    assert run.feed(0.0, 4)[0].kind is Kind.RESOLVED


def test_no_data_holds_pending_without_completing_for() -> None:
    run = Run(rule())
    run.feed(0.2, 0)
    assert run.feed(None, 10) == [] and run.status() is Status.PENDING
    assert run.feed(0.2, 11)[0].kind is Kind.FIRING  # the next real breach confirms it


def test_repeat_interval_and_sequence_numbers() -> None:
    run = Run(rule(**{"for": "0s"}))
    [first] = run.feed(0.2, 0)
    assert run.feed(0.2, 59) == []
    [rep1] = run.feed(0.2, 60)
    assert rep1.kind is Kind.REPEAT and rep1.sequence == 1
    assert rep1.idempotency_key == f"{first.fingerprint}:{T0.isoformat()}:repeat:1"
    assert run.feed(0.2, 100) == []
    [rep2] = run.feed(0.2, 121)  # repeats are timed from the last notification
    assert rep2.sequence == 2 and rep2.created_at == at(121)
    # no data while firing: reminders still go out
    [rep3] = run.feed(None, 182)
    assert rep3.kind is Kind.REPEAT and rep3.value == 0.2


def test_same_inputs_give_same_keys_so_a_retry_is_deduplicated() -> None:
    r = rule(**{"for": "0s"})
    s1, out1 = evaluate(r, None, obs(0.2, 0), at(0))
    s2, out2 = evaluate(r, None, obs(0.2, 0), at(0))
    assert s1 == s2 and out1 == out2
    # replaying the evaluation on the already-updated state emits nothing new
    s3, out3 = evaluate(r, s1, obs(0.2, 0), at(0))
    assert out3 == [] and s3 is s1


def test_ack_stops_repeats_until_resolved() -> None:
    run = Run(rule(**{"for": "0s"}))
    [n] = run.feed(0.2, 0)
    assert run.state is not None
    with pytest.raises(ValueError, match="ack for"):
        acknowledge(run.state, Ack("other", "alice", at(1)))
    run.state = acknowledge(run.state, Ack(n.fingerprint, "alice", at(1), "looking"))
    assert run.state.acked_by == "alice" and run.state.version == 2
    assert run.feed(0.2, 61) == [] and run.feed(0.2, 200) == []
    [resolved] = run.feed(0.0, 201)
    assert resolved.kind is Kind.RESOLVED and resolved.acked_by == "alice"
    assert run.state.acked_by is None
    with pytest.raises(ValueError, match="not firing"):
        acknowledge(run.state, Ack(n.fingerprint, "alice", at(202)))
    # next episode is not acked
    assert run.feed(0.2, 210)[0].kind is Kind.FIRING
    assert run.feed(0.2, 270)[0].kind is Kind.REPEAT


def test_redaction_applies_unless_the_rule_opts_in() -> None:
    r = rule(**{"for": "0s"})
    detail = "customer jane@example.com paid with 4111 1111 1111 1111, order 98765"
    _, [n] = evaluate(r, None, obs(0.2, 0, detail=detail), at(0))
    assert n.detail == "customer [email] paid with [card], order 98765"
    opted = rule(**{"for": "0s", "redact_customer_content": False})
    _, [m] = evaluate(opted, None, obs(0.2, 0, detail=detail + " token=abc123"), at(0))
    assert m.detail == detail + " token=[secret]"  # secrets are never sent


def test_invalid_inputs_are_rejected() -> None:
    r = rule()
    with pytest.raises(ValueError, match="timezone-aware"):
        evaluate(r, None, obs(0.1, 0), datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="given to"):
        evaluate(r, None, Observation("other", SCOPE, 0.1, 1, at(0)), at(0))
    wrong = AlertState.new("ece_tier3", {"agent": "support"})
    with pytest.raises(ValueError, match="is not the observation"):
        evaluate(r, wrong, obs(0.1, 0), at(0))
    with pytest.raises(ValueError, match="finite"):
        obs(float("nan"), 0)


def test_states_and_notifications_round_trip_through_dicts() -> None:
    run = Run(rule(**{"for": "0s"}))
    [n] = run.feed(0.2, 0)
    assert run.state is not None
    assert AlertState.from_dict(run.state.to_dict()) == run.state
    assert Notification.from_dict(n.to_dict()) == n
    assert n.to_dict()["fired_at"] == T0.isoformat()
    assert fingerprint("r", {"tier": 3, "domain": None}) == fingerprint("r", {"tier": "3"})
    paris = timezone(timedelta(hours=1))
    _, [same] = evaluate(run.rule, None, obs(0.2, 0), T0.astimezone(paris))
    assert same.idempotency_key == n.idempotency_key  # keys do not depend on the time zone


values = st.one_of(st.none(), st.floats(min_value=0, max_value=0.2))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(values, st.integers(1, 90)), min_size=1, max_size=40))
def test_invariants_over_random_histories(steps: list[tuple[float | None, int]]) -> None:
    """Keys never repeat; resolved only follows a sent firing; firing/resolved alternate."""
    run = Run(rule())
    minute = 0
    for value, gap in steps:
        minute += gap
        before = run.state.version if run.state else 0
        out = run.feed(value, minute)
        assert run.state is not None and run.state.version >= before
        if run.status() is not Status.FIRING:
            assert all(n.kind is Kind.RESOLVED for n in out)
    keys = [n.idempotency_key for n in run.sent]
    assert len(keys) == len(set(keys))
    opened = False
    for n in run.sent:
        if n.kind is Kind.FIRING:
            assert not opened
            opened = True
        elif n.kind is Kind.REPEAT:
            assert opened
        else:
            assert opened
            opened = False


@pytest.mark.parametrize(
    "metric,comparison,value,scope,fired_for,expected",
    [
        (
            "ece",
            ">",
            0.0794,
            {"agent": "a", "tier": "3"},
            timedelta(minutes=10),
            "ECE 0.0794, back under 0.08 for a (tier 3) after 10 min firing",
        ),
        (
            "accuracy",
            "<",
            0.91,
            {"agent": "a", "domain": "retail"},
            timedelta(hours=2, minutes=5),
            "Accuracy 0.91, back above 0.08 for a / retail after 2 h 5 min firing",
        ),
        (
            "drift",
            ">=",
            0.0,
            {"agent": "a", "tier": "2"},
            timedelta(seconds=40),
            "Drift no longer detected for a (tier 2) after 40 s firing",
        ),
        (
            "dlq_rate",
            ">",
            None,
            {},
            timedelta(days=1, hours=3),
            "Dead-letter rate n/a, back under 0.08 for all agents after 1 d 3 h firing",
        ),
    ],
)
def test_resolved_summary_says_what_resolved_it(
    metric: str,
    comparison: str,
    value: float | None,
    scope: dict[str, str],
    fired_for: timedelta,
    expected: str,
) -> None:
    from monitor.alerts.wording import resolved_summary

    assert resolved_summary(metric, comparison, 0.08, value, scope, fired_for) == expected


def test_a_confirmed_breach_fires_at_once_whatever_for() -> None:
    r = rule(**{"for": "10m"})
    state, out = evaluate(r, None, obs(0.09, 0), at(0))
    assert out == [] and state.status is Status.PENDING  # an ordinary breach waits its for
    state, out = evaluate(r, None, obs(0.09, 0, confirmed=True), at(0))
    assert state.status is Status.FIRING and [n.kind for n in out] == [Kind.FIRING]


def test_drift_observations_confirm_only_a_sequential_test() -> None:
    from monitor.alerts.observation_repo import DriftRow
    from monitor.alerts.observations import drift_observations

    r = rule(name="drift_tier3", metric="drift", comparison=">=", threshold=1, min_samples=0)
    seg = ("billing", "qa", 3)

    def one(tests: tuple[str, ...]) -> Observation:
        row = DriftRow(seg, bool(tests), tests, 150, at(0), "why")
        [o] = drift_observations(r, [row], at(0))
        return o

    assert (one(("surprise",)).value, one(("surprise",)).confirmed) == (1.0, True)
    assert (one(("psi", "ks")).value, one(("psi", "ks")).confirmed) == (1.0, False)
    assert (one(()).value, one(()).confirmed) == (0.0, False)
    # a rule on a fixed-window test waits its for, even when the sequential test fired too
    r = r.model_copy(update={"test": "accuracy_drop"})
    both = one(("accuracy_drop", "surprise"))
    assert (both.value, both.confirmed) == (1.0, False)
