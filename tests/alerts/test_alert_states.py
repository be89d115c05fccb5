"""The stored and emitted alert values survive ``to_dict`` -> JSON -> ``from_dict`` unchanged."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from monitor.alerts.grouping import Group, GroupedNotification
from monitor.alerts.silences import Ack, Matcher, Silence
from monitor.alerts.states import AlertState, Kind, Notification, Status

T0 = datetime(2026, 11, 1, 12, 0, 0, 123456, tzinfo=UTC)
PARIS = timezone(timedelta(hours=1))
KOLKATA = timezone(timedelta(hours=5, minutes=30))


def through_json(value: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(value.to_dict()))
    return out


def full_state() -> AlertState:
    """Every field away from its default; times in three offsets."""
    return AlertState(
        fingerprint="0123456789abcdef",
        rule="ece_tier3",
        scope={"agent": "billing", "tier": 3, "domain": None},
        status=Status.FIRING,
        active_since=T0,
        fired_at=T0 + timedelta(minutes=5),
        resolved_at=(T0 - timedelta(days=1)).astimezone(PARIS),
        last_notified_at=(T0 + timedelta(minutes=5)).astimezone(KOLKATA),
        notified=3,
        silenced=True,
        acked_by="alice",
        acked_at=(T0 + timedelta(minutes=7)).astimezone(PARIS),
        last_value=0.125,
        last_samples=412.5,
        last_observed_at=T0 + timedelta(minutes=9),
        clear_since=T0 + timedelta(minutes=8),
        changes=(T0, (T0 + timedelta(hours=1)).astimezone(KOLKATA)),
        flapping=True,
        flap_share=0.375,
        version=17,
    )


def notification(**changes: Any) -> Notification:
    fields: dict[str, Any] = {
        "idempotency_key": "0123456789abcdef:2026-11-01T12:00:00+00:00:firing:0",
        "kind": Kind.FIRING,
        "sequence": 0,
        "fingerprint": "0123456789abcdef",
        "rule": "ece_tier3",
        "metric": "ece",
        "severity": "critical",
        "scope": {"agent": "billing", "tier": "3"},
        "labels": {"alertname": "ece_tier3", "team": "payments"},
        "summary": "ECE 0.12 over 0.08",
        "description": "calibration drifted",
        "runbook_url": "https://runbooks.example/ece",
        "value": 0.125,
        "threshold": 0.08,
        "comparison": ">",
        "samples": 412.5,
        "window": "1h",
        "fired_at": T0.astimezone(PARIS),
        "resolved_at": T0 + timedelta(hours=2),
        "created_at": T0 + timedelta(seconds=1),
        "acked_by": "alice",
        "detail": "sequential test",
    }
    return Notification(**{**fields, **changes})


def test_alert_state_round_trips_every_field() -> None:
    s = full_state()
    back = AlertState.from_dict(through_json(s))
    assert back == s and back.scope == {"agent": "billing", "tier": "3"}
    assert isinstance(back.status, Status) and isinstance(back.changes, tuple)
    for name in ("fired_at", "resolved_at", "last_notified_at", "acked_at"):
        got, want = getattr(back, name), getattr(s, name)
        assert got.utcoffset() == want.utcoffset() and got.isoformat() == want.isoformat()
    assert [c.utcoffset() for c in back.changes] == [c.utcoffset() for c in s.changes]
    assert back.to_dict() == s.to_dict() and back.episode == s.episode
    assert AlertState.from_dict(through_json(AlertState.new("r", {}))) == AlertState.new("r", {})


def test_alert_state_stored_before_flap_detection_takes_the_defaults() -> None:
    s = full_state()
    old = through_json(s)
    for key in ("clear_since", "changes", "flapping", "flap_share"):
        del old[key]
    back = AlertState.from_dict(old)
    assert (back.clear_since, back.changes, back.flapping, back.flap_share) == (None, (), False, 0)
    assert back.fired_at == s.fired_at and back.version == s.version
    minimal = AlertState.from_dict({"fingerprint": "f", "rule": "r", "scope": {}, "extra": 1})
    assert minimal == AlertState("f", "r", {})


def test_notifications_and_groups_round_trip_every_field() -> None:
    n = notification()
    assert Notification.from_dict(through_json(n)) == n
    resolved = notification(kind=Kind.RESOLVED, value=None, runbook_url=None, acked_by=None)
    assert Notification.from_dict(through_json(resolved)) == resolved
    older = through_json(n)
    del older["acked_by"], older["detail"]
    assert Notification.from_dict(older) == notification(acked_by=None, detail=None)
    batch = GroupedNotification("group:ab", "severity=critical", {"severity": "critical"}, (n,), T0)
    back = GroupedNotification.from_dict(through_json(batch))
    assert back == batch and back.notifications[0].fired_at.utcoffset() == timedelta(hours=1)
    group = Group("severity=critical", {"severity": "critical"}, (n, resolved), T0, None)
    assert Group.from_dict(through_json(group)) == group


def test_silences_and_acks_round_trip() -> None:
    s = Silence("s1", (Matcher("agent", "bill*"),), T0, T0.astimezone(PARIS), "deploy", "bob")
    assert Silence.from_dict(through_json(s)) == s
    ack = Ack("0123456789abcdef", "alice", T0.astimezone(KOLKATA), "on it")
    assert Ack.from_dict(through_json(ack)) == ack
    old_ack = {"fingerprint": "f", "created_by": "alice", "at": T0.isoformat()}
    assert Ack.from_dict(old_ack) == Ack("f", "alice", T0)


@pytest.mark.parametrize(
    "data",
    [
        {"rule": "r", "scope": {}},
        {"fingerprint": "f", "rule": "r", "scope": {}, "status": "exploded"},
        {"fingerprint": "f", "rule": "r", "scope": {}, "fired_at": "yesterday"},
        {"fingerprint": "f", "rule": "r", "scope": None},
    ],
)
def test_malformed_dicts_raise_value_error(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        AlertState.from_dict(data)


def test_malformed_notifications_and_silences_raise_value_error() -> None:
    data = through_json(notification())
    with pytest.raises(ValueError):
        Notification.from_dict({**data, "fired_at": None})
    with pytest.raises(ValueError):
        Notification.from_dict({k: v for k, v in data.items() if k != "summary"})
    s = Silence("s1", (Matcher("agent", "x"),), T0, T0, "r", "me").to_dict()
    with pytest.raises(ValueError, match="timezone-aware"):
        Silence.from_dict({**s, "starts_at": "2026-11-01T12:00:00"})
    with pytest.raises(ValueError, match="label and a pattern"):
        Silence.from_dict({**s, "matchers": [{"label": "", "pattern": "x"}]})
