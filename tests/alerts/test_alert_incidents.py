"""The incident step: plain values in and out, explicit times."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from monitor.alerts.grouping import GroupingPolicy
from monitor.alerts.grouping import step as group_step
from monitor.alerts.incidents import (
    Incident,
    IncidentPolicy,
    IncidentStep,
    Role,
    incident_id,
    step,
)
from monitor.alerts.rules import load_rules
from monitor.alerts.states import Notification
from monitor.core.errors import ConfigError
from tests.servers.alert_servers import notification

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
POLICY = IncidentPolicy(("agent",), timedelta(minutes=30), repage=True)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def fire(
    rule: str, agent: str = "billing", severity: str = "critical", m: float = 0
) -> Notification:
    return notification(rule=rule, agent=agent, severity=severity, fired_at=at(m))


def resolve(n: Notification, m: float) -> Notification:
    """The resolved notification of ``n``'s episode, at ``m`` minutes."""
    r = notification(rule=n.rule, agent=n.scope["agent"], kind="resolved", fired_at=n.fired_at)
    return Notification.from_dict({**r.to_dict(), "severity": n.severity, "created_at": at(m)})


@dataclass
class World:
    """The incidents between steps, as the evaluator keeps them in the store."""

    policy: IncidentPolicy = POLICY
    incidents: dict[str, Incident] = field(default_factory=dict)
    firing: set[str] = field(default_factory=set)

    def run(self, m: float, notes: Iterable[Notification] = ()) -> IncidentStep:
        notes = list(notes)
        for n in notes:
            if n.kind.value in ("firing", "repeat"):
                self.firing.add(n.fingerprint)
            elif n.kind.value == "resolved":
                self.firing.discard(n.fingerprint)
        out = step(self.incidents.values(), notes, self.firing, self.policy, at(m))
        self.incidents = {
            i: inc for i, inc in out.incidents.items() if inc.joinable(at(m), self.policy.window)
        }
        return out


def roles(out: IncidentStep) -> list[tuple[str, str | None]]:
    return [(n.rule, n.incident_role) for n in out.notifications]


def test_an_agents_alerts_page_once_and_the_incident_resolves_with_the_last() -> None:
    w = World()
    ece, drift = fire("ece_tier3"), fire("drift_tier3", m=20)
    other = fire("ece_tier3", agent="support", m=20)
    first = w.run(0, [ece])
    assert roles(first) == [("ece_tier3", "open")] and len(first.pages) == 1
    iid = first.notifications[0].incident_id
    assert iid == incident_id("agent=billing", at(0)) and iid is not None
    assert first.notifications[0].labels["incident"] == iid
    second = w.run(20, [drift, other])
    assert roles(second) == [("drift_tier3", "update"), ("ece_tier3", "open")]
    assert second.notifications[0].incident_id == iid
    assert second.notifications[1].incident_id != iid
    assert [n.scope["agent"] for n in second.pages] == ["support"]
    inc = w.incidents[iid]
    assert [m.rule for m in inc.members] == ["ece_tier3", "drift_tier3"]
    assert inc.status == "open" and inc.pages == 1 and inc.updates == 1
    assert set(inc.firing) == {ece.fingerprint, drift.fingerprint}
    third = w.run(60, [resolve(ece, 60)])
    assert roles(third) == [("ece_tier3", "update")] and w.incidents[iid].status == "open"
    last = w.run(90, [resolve(drift, 90)])
    assert roles(last) == [("drift_tier3", "close")]
    done = w.incidents[iid]
    assert done.status == "resolved" and done.resolved_at == at(90) and done.firing == ()
    assert done.pages == 1 and done.updates == 3
    assert last.changed == (iid,) and done.version == 3


def test_the_window_after_a_resolution_reopens_and_after_it_a_new_incident_pages() -> None:
    w = World()
    ece = fire("ece_tier3")
    iid = w.run(0, [ece]).notifications[0].incident_id
    w.run(10, [resolve(ece, 10)])
    again = w.run(40, [fire("brier_tier3", severity="critical", m=40)])  # 30 min after: joins
    assert roles(again) == [("brier_tier3", "update")]
    assert again.notifications[0].incident_id == iid
    assert w.incidents[iid].status == "open" and w.incidents[iid].resolved_at is None
    w.run(50, [resolve(again.notifications[0], 50)])
    later = w.run(80.5, [fire("ece_tier3", m=80.5)])  # 30.5 min after: a new incident
    assert roles(later) == [("ece_tier3", "open")]
    assert later.notifications[0].incident_id != iid
    # a zero window: only a still open incident is joined
    z = World(IncidentPolicy(window=timedelta(0)))
    a = fire("ece_tier3")
    z.run(0, [a])
    z.run(5, [resolve(a, 5)])
    assert roles(z.run(5.5, [fire("drift_tier3", m=5.5)])) == [("drift_tier3", "open")]


def test_a_higher_severity_repages_once_unless_turned_off() -> None:
    w = World()
    w.run(0, [fire("gate_degraded", severity="info")])
    out = w.run(5, [fire("brier_tier3", severity="warning", m=5)])
    assert roles(out) == [("brier_tier3", "repage")] and len(out.pages) == 1
    more = w.run(10, [fire("ece_tier3", severity="critical", m=10)])  # the one re-page is used
    assert roles(more) == [("ece_tier3", "update")] and more.pages == ()
    inc = next(iter(w.incidents.values()))
    assert (inc.pages, inc.repaged, inc.severity, inc.paged_severity) == (
        2,
        True,
        "critical",
        "warning",
    )
    same = World()
    same.run(0, [fire("ece_tier3", severity="critical")])
    assert roles(same.run(5, [fire("drift_tier3", severity="critical", m=5)])) == [
        ("drift_tier3", "update")
    ]
    off = World(IncidentPolicy())  # the default
    off.run(0, [fire("brier_tier3", severity="warning")])
    assert roles(off.run(5, [fire("ece_tier3", m=5)])) == [("ece_tier3", "update")]


def test_alerts_firing_together_open_at_the_highest_severity_in_their_order() -> None:
    w = World()
    warn, crit = fire("brier_tier3", severity="warning"), fire("ece_tier3", severity="critical")
    out = w.run(0, [warn, crit])
    assert roles(out) == [("brier_tier3", "update"), ("ece_tier3", "open")]
    inc = next(iter(w.incidents.values()))
    assert inc.paged_severity == "critical" and inc.pages == 1
    assert [m.rule for m in inc.members] == ["ece_tier3", "brier_tier3"]


def test_a_silent_member_keeps_it_open_and_its_silent_end_closes_it() -> None:
    w = World()
    a, b = fire("ece_tier3"), fire("drift_tier3", m=1)
    iid = w.run(0, [a]).notifications[0].incident_id
    assert iid is not None
    w.run(1, [b])
    # b is silenced from here on: it keeps firing without a word, and holds the incident open
    assert roles(w.run(5, [resolve(a, 5)])) == [("ece_tier3", "update")]
    assert w.incidents[iid].status == "open" and w.incidents[iid].firing == (b.fingerprint,)
    w.firing.discard(b.fingerprint)  # b resolved while silenced: no notification
    quiet = w.run(6)
    assert quiet.notifications == () and quiet.changed == (iid,)
    assert w.incidents[iid].resolved_at == at(6)
    # an alert that fires but was never announced (silenced) does not hold one open
    w2 = World()
    c = fire("ece_tier3")
    iid2 = w2.run(0, [c]).notifications[0].incident_id
    assert iid2 is not None
    w2.firing.add(fire("brier_tier3").fingerprint)
    w2.run(10, [resolve(c, 10)])
    assert w2.incidents[iid2].status == "resolved"


def test_repeats_and_notifications_without_an_incident() -> None:
    w = World()
    ece = fire("ece_tier3")
    iid = w.run(0, [ece]).notifications[0].incident_id
    rep = notification(rule="ece_tier3", kind="repeat", sequence=1, fired_at=at(0))
    assert roles(w.run(240, [rep])) == [("ece_tier3", "update")]
    # an alert firing since before incidents existed: its repeat joins or opens, its
    # resolution passes through without an incident
    old = notification(rule="brier_tier3", agent="support", kind="repeat", sequence=3)
    out = w.run(241, [old])
    assert roles(out) == [("brier_tier3", "open")]
    gone = notification(rule="dlq_rate", agent="x", kind="resolved")
    passed = w.run(242, [gone])
    assert passed.notifications == (gone,) and passed.notifications[0].incident_id is None
    assert w.incidents[iid].pages == 1


def test_incident_by_labels_and_global_alerts() -> None:
    by_tier = World(IncidentPolicy(("agent", "tier")))
    a = fire("ece_tier3")
    b = Notification.from_dict(
        {**fire("ece_tier2").to_dict(), "labels": {**a.labels, "alertname": "x", "tier": "2"}}
    )
    out = by_tier.run(0, [a, b])
    assert roles(out) == [("ece_tier3", "open"), ("ece_tier2", "open")]
    key, labels = IncidentPolicy().key({"alertname": "dlq_rate", "severity": "warning"})
    assert (key, labels) == ("agent=", {"agent": ""})


def test_incident_round_trip_and_validation() -> None:
    w = World()
    w.run(0, [fire("ece_tier3"), fire("drift_tier3")])
    inc = next(iter(w.incidents.values()))
    assert Incident.from_dict(inc.to_dict()) == inc
    with pytest.raises(ValueError, match="negative"):
        IncidentPolicy(window=timedelta(seconds=-1))
    with pytest.raises(ValueError, match="timezone-aware"):
        step([], [], set(), POLICY, datetime(2026, 3, 1))


def test_rules_file_sets_the_incident_policy() -> None:
    rules = load_rules(
        "incident_by: [agent, tier]\nincident_window: 2h\nincident_repage: true\n", "a.yaml"
    )
    assert IncidentPolicy.from_rules(rules) == IncidentPolicy(
        ("agent", "tier"), timedelta(hours=2), True
    )
    defaults = IncidentPolicy.from_rules(load_rules("", "b.yaml"))
    assert defaults == IncidentPolicy(("agent",), timedelta(minutes=30), False)
    with pytest.raises(ConfigError, match=r"c.yaml:2: incident_window: '-5m' is not a duration"):
        load_rules("group_wait: 30s\nincident_window: -5m\n", "c.yaml")
    with pytest.raises(ConfigError, match=r"d.yaml:1: incident_repage"):
        load_rules("incident_repage: maybe\n", "d.yaml")


def test_grouping_keeps_incidents_apart_and_names_the_batch_role() -> None:
    w = World()
    ece = fire("ece_tier3")
    opened = w.run(0, [ece]).notifications
    policy = GroupingPolicy(("severity", "agent"), timedelta(seconds=30), timedelta(minutes=5))
    held = group_step({}, opened, policy, at(1))
    assert held.ready == []
    first = group_step(held.groups, [], policy, at(2))
    [batch] = first.ready
    assert batch.incident_id == opened[0].incident_id and batch.incident_role == "open"
    assert batch.group_key.endswith(f",incident={opened[0].incident_id}")
    payload = batch.to_dict()
    assert payload["incident_id"] == opened[0].incident_id
    assert payload["incident_role"] == "open"
    assert type(batch).from_dict(payload) == batch
    upd = w.run(3, [fire("drift_tier3", m=3)]).notifications
    later = group_step(group_step(first.groups, upd, policy, at(3)).groups, [], policy, at(7))
    assert [b.incident_role for b in later.ready] == ["update"]
    assert Role("repage").pages and not Role("close").pages
