"""Incidents: the alerts of one agent that are open together page once. Pure, time injected.

An incident gathers the alerts whose notification labels agree on the rules file's
``incident_by`` labels (the incident *key*, e.g. ``agent=billing``; a missing label counts as
``""``, so the global pipeline rules share the key ``agent=``). :func:`step` runs after the
lifecycle step of an evaluation, on the notifications that step emitted and the fingerprints
firing after it:

- An alert announcing that it fires (a ``firing`` notification, or a ``repeat`` of an alert
  that belongs to no incident, e.g. one that fired before incidents existed) joins the open
  incident of its key, or the last one that resolved at most ``incident_window`` ago (which
  reopens it); otherwise it opens a new incident. The notification that opens an incident is
  its page (role ``open``). A joining one is an ``update``, unless ``incident_repage`` is on,
  the incident has not re-paged yet and the alert is more severe than the incident's last page:
  then it pages once more (``repage``; at most once per incident).
- Every other notification of a member (``repeat``, ``resolved``, ``flapping``) is an
  ``update``.
- An incident stays open while one of its members is firing (a silenced, acked or flapping
  one too: the problem is still there). Once none is, it resolves at ``now``, and the
  ``resolved`` notification of its last alert in this step, if any, becomes its ``close``. A
  member that resolved without a notification (silenced, or held as flapping) closes it
  without one.
- The alerts that fire in one evaluation are taken most severe first, so an incident opens at
  its highest severity and is not re-paged by an alert that came with it.

Every notification of an incident gets ``incident_id``, ``incident_role`` and the label
``incident`` = its id (sinks that group by labels, such as Alertmanager, then see one group);
others pass through unchanged, in the order given. The id (``inc-`` and 12 hex digits) is a
hash of the key and the opening time, so a replay of the same history (``alerts backtest``)
gives the same ids as the worker.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import TypeAdapter

from monitor.alerts.rule_models import RuleSet
from monitor.alerts.states import Kind, Notification, frozen_labels, require_aware

SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
"""Severities, most severe first; an unknown severity ranks below ``info``."""


def severity_rank(severity: str) -> int:
    """0 for ``critical``, 1 ``warning``, 2 ``info``, 9 anything else (lower is more severe)."""
    return SEVERITY_RANK.get(severity, 9)


class Role(StrEnum):
    """What a notification is to its incident."""

    OPEN = "open"
    REPAGE = "repage"
    UPDATE = "update"
    CLOSE = "close"

    @property
    def pages(self) -> bool:
        """True for the roles that page (``open``, ``repage``); the others are updates."""
        return self in (Role.OPEN, Role.REPAGE)


@dataclass(frozen=True)
class IncidentPolicy:
    """``by``: the labels forming the incident key; ``window`` (>= 0): how long after its
    resolution an incident may still be joined; ``repage`` (off by default): a more severe
    alert joining an open incident pages once more. Raises ValueError for a negative window."""

    by: tuple[str, ...] = ("agent",)
    window: timedelta = timedelta(minutes=30)
    repage: bool = False

    def __post_init__(self) -> None:
        if self.window < timedelta(0):
            raise ValueError("the incident window must not be negative")

    @classmethod
    def from_rules(cls, rules: RuleSet) -> IncidentPolicy:
        """The policy configured at the top of a rules file."""
        return cls(rules.incident_by, rules.incident_window, rules.incident_repage)

    def key(self, labels: Mapping[str, str]) -> tuple[str, dict[str, str]]:
        """``("agent=billing", {"agent": "billing"})``: the incident key and its labels."""
        values = {name: labels.get(name, "") for name in self.by}
        return ",".join(f"{k}={v}" for k, v in values.items()), values


def incident_id(key: str, opened_at: datetime) -> str:
    """``inc-`` + 12 hex digits of BLAKE2b over the key and the opening time (UTC, ISO)."""
    canonical = json.dumps([key, opened_at.astimezone(UTC).isoformat()], separators=(",", ":"))
    return "inc-" + hashlib.blake2b(canonical.encode(), digest_size=6).hexdigest()


@dataclass(frozen=True)
class Member:
    """An alert that joined an incident: its fingerprint, rule and severity, and when."""

    fingerprint: str
    rule: str
    severity: str
    joined_at: datetime


@dataclass(frozen=True)
class Incident:
    """One incident (JSON round trip with ``to_dict``/``from_dict``, like the alert states).

    - ``key`` / ``labels``: the ``incident_by`` values its alerts share.
    - ``severity``: the most severe member's; ``paged_severity``: that of its last page.
    - ``members``: the alerts that joined, in order; ``firing``: the members firing after the
      last step.
    - ``resolved_at``: when its last firing member stopped (None while open).
    - ``pages``: pages sent (1, 2 after a re-page); ``updates``: update notifications;
      ``repaged``: the one re-page was used.
    - ``version``: incremented on every change.
    """

    id: str
    key: str
    labels: Mapping[str, str] = field(hash=False)
    opened_at: datetime
    severity: str
    paged_severity: str
    members: tuple[Member, ...] = ()
    firing: tuple[str, ...] = ()
    resolved_at: datetime | None = None
    pages: int = 1
    updates: int = 0
    repaged: bool = False
    version: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", frozen_labels(self.labels))

    @property
    def status(self) -> str:
        """``open`` or ``resolved``."""
        return "open" if self.resolved_at is None else "resolved"

    def has(self, fingerprint: str) -> bool:
        """True when the alert ``fingerprint`` joined this incident."""
        return any(m.fingerprint == fingerprint for m in self.members)

    def joinable(self, now: datetime, window: timedelta) -> bool:
        """Open, or resolved at most ``window`` before ``now``."""
        return self.resolved_at is None or now - self.resolved_at <= window

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: times as ISO 8601 strings, members as dicts."""
        return {
            "id": self.id,
            "key": self.key,
            "labels": dict(self.labels),
            "opened_at": self.opened_at.isoformat(),
            "severity": self.severity,
            "paged_severity": self.paged_severity,
            "members": [
                {
                    "fingerprint": m.fingerprint,
                    "rule": m.rule,
                    "severity": m.severity,
                    "joined_at": m.joined_at.isoformat(),
                }
                for m in self.members
            ],
            "firing": list(self.firing),
            "resolved_at": None if self.resolved_at is None else self.resolved_at.isoformat(),
            "pages": self.pages,
            "updates": self.updates,
            "repaged": self.repaged,
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Incident:
        """Inverse of ``to_dict``; raises ValueError (pydantic's ValidationError) on a
        malformed dict."""
        return _INCIDENT.validate_python(dict(data))


_INCIDENT = TypeAdapter(Incident)


@dataclass(frozen=True)
class IncidentStep:
    """What :func:`step` returns.

    ``incidents``: every incident given or opened, after the step, by id; ``changed``: the
    ids whose incident changed (the caller stores those); ``notifications``: the input, in its
    order, each of an incident annotated (module docstring).
    """

    incidents: dict[str, Incident]
    changed: tuple[str, ...]
    notifications: tuple[Notification, ...]

    @property
    def pages(self) -> tuple[Notification, ...]:
        """The notifications that page (role ``open`` or ``repage``)."""
        return tuple(
            n
            for n in self.notifications
            if n.incident_role is not None and Role(n.incident_role).pages
        )


def _announces(n: Notification, member: bool) -> bool:
    return n.kind is Kind.FIRING or (n.kind is Kind.REPEAT and not member)


def step(
    live: Iterable[Incident],
    notifications: Sequence[Notification],
    firing: Collection[str],
    policy: IncidentPolicy,
    now: datetime,
) -> IncidentStep:
    """One incident step at ``now`` (module docstring).

    ``live``: the incidents that are open or resolved within the window (older ones are
    ignored); ``notifications``: what the lifecycle emitted at ``now``, in order; ``firing``:
    the fingerprints firing after that lifecycle step. Raises ValueError for a naive ``now``.
    """
    require_aware(now, "now")
    now = now.astimezone(UTC)
    current = {i.id: i for i in live if i.joinable(now, policy.window)}
    before = dict(current)

    def target(key: str) -> Incident | None:
        same = [i for i in current.values() if i.key == key]
        opened = [i for i in same if i.resolved_at is None]
        if opened:
            return max(opened, key=lambda i: i.opened_at)
        return max(same, key=lambda i: (i.resolved_at or now, i.opened_at), default=None)

    def member_of(fingerprint: str) -> Incident | None:
        holding = [i for i in current.values() if i.has(fingerprint)]
        return max(
            holding, key=lambda i: (i.resolved_at is None, i.resolved_at or now), default=None
        )

    announce = [_announces(n, member_of(n.fingerprint) is not None) for n in notifications]
    order = sorted(
        range(len(notifications)),
        key=lambda i: (not announce[i], severity_rank(notifications[i].severity), i),
    )
    roles: dict[int, tuple[str, Role]] = {}
    for i in order:
        n = notifications[i]
        if announce[i]:
            key, labels = policy.key(n.labels)
            inc = target(key)
            member = Member(n.fingerprint, n.rule, n.severity, now)
            if inc is None:
                inc = Incident(
                    incident_id(key, now), key, labels, now, n.severity, n.severity, (member,)
                )
                role = Role.OPEN
            else:
                joined = inc.members if inc.has(n.fingerprint) else (*inc.members, member)
                worst = min(inc.severity, n.severity, key=severity_rank)
                inc = replace(inc, members=joined, resolved_at=None, severity=worst)
                raised = severity_rank(n.severity) < severity_rank(inc.paged_severity)
                if raised and policy.repage and not inc.repaged:
                    inc = replace(inc, pages=inc.pages + 1, repaged=True, paged_severity=n.severity)
                    role = Role.REPAGE
                else:
                    role = Role.UPDATE
        else:
            holder = member_of(n.fingerprint)
            if holder is None:
                continue
            inc, role = holder, Role.UPDATE
        current[inc.id] = inc
        roles[i] = (inc.id, role)
    for iid, inc in list(current.items()):
        still = tuple(m.fingerprint for m in inc.members if m.fingerprint in firing)
        if inc.resolved_at is None and not still:
            inc = replace(inc, resolved_at=now)
            last = [
                i
                for i, (rid, _) in roles.items()
                if rid == iid and notifications[i].kind is Kind.RESOLVED
            ]
            if last:
                roles[max(last)] = (iid, Role.CLOSE)
        current[iid] = replace(inc, firing=still)
    for iid, role in roles.values():
        if not role.pages:
            current[iid] = replace(current[iid], updates=current[iid].updates + 1)
    changed = []
    for iid, inc in current.items():
        old = before.get(iid)
        if inc != old:
            current[iid] = replace(inc, version=0 if old is None else old.version + 1)
            changed.append(iid)
    out = []
    for i, n in enumerate(notifications):
        if i in roles:
            iid, role = roles[i]
            labels = {**n.labels, "incident": iid}
            n = replace(n, incident_id=iid, incident_role=role.value, labels=labels)
        out.append(n)
    return IncidentStep(current, tuple(sorted(changed)), tuple(out))
