"""Batch notifications that fire together into one grouped notification. Pure, ``now`` passed in.

Notifications with equal values of the ``group_by`` labels (default ``severity`` and ``agent``;
a missing label counts as ``""``) share a group; a notification of an incident (label
``incident``, :mod:`monitor.alerts.incidents`) is grouped only with its incident's, so a batch
never speaks for two incidents. A group holds its pending notifications and
flushes them as one :class:`GroupedNotification`:

- the first batch of a group waits ``group_wait`` after its first pending notification (so
  alerts that fire together arrive together);
- later batches wait ``group_interval`` after the previous flush;
- a group with nothing pending for ``group_interval`` after its last flush is forgotten, so the
  next notification is a first batch again.

Within a group's pending notifications, per fingerprint and episode: a ``resolved`` supersedes
a pending ``firing``/``repeat``, and when the superseded one was the episode's first
``firing`` (the receiver never heard of it) both are dropped; a ``repeat`` never displaces a
pending ``firing``/``repeat``. Superseded notifications are returned so an outbox can mark
them done. A notification whose idempotency key is already pending is ignored (retries).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import TypeAdapter

from monitor.alerts.rule_models import RuleSet
from monitor.alerts.states import Kind, Notification, frozen_labels, require_aware

_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class GroupingPolicy:
    """``group_by`` label names, ``group_wait`` (>= 0) and ``group_interval`` (> 0).

    Raises ValueError for a negative wait or a non-positive interval.
    """

    group_by: tuple[str, ...] = ("severity", "agent")
    group_wait: timedelta = timedelta(seconds=30)
    group_interval: timedelta = timedelta(minutes=5)

    def __post_init__(self) -> None:
        if self.group_wait < timedelta(0) or self.group_interval <= timedelta(0):
            raise ValueError("group_wait must be >= 0 and group_interval > 0")

    @classmethod
    def from_rules(cls, rules: RuleSet) -> GroupingPolicy:
        """The policy configured at the top of a rules file."""
        return cls(rules.group_by, rules.group_wait, rules.group_interval)

    def key(self, labels: Mapping[str, str]) -> tuple[str, dict[str, str]]:
        """``("severity=critical,agent=billing", {...})``: the group key and its labels
        (``incident`` appended when the labels name one and ``group_by`` does not)."""
        values = {name: labels.get(name, "") for name in self.group_by}
        if "incident" in labels and "incident" not in values:
            values["incident"] = labels["incident"]
        return ",".join(f"{k}={v}" for k, v in values.items()), values


@dataclass(frozen=True)
class Group:
    """The stored state of one group (JSON round trip with ``to_dict``/``from_dict``)."""

    key: str
    labels: Mapping[str, str] = field(hash=False)
    pending: tuple[Notification, ...] = ()
    first_pending_at: datetime | None = None
    last_flushed_at: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", frozen_labels(self.labels))

    def due_at(self, policy: GroupingPolicy) -> datetime | None:
        """When the pending batch may be sent; None when nothing is pending."""
        if not self.pending or self.first_pending_at is None:
            return None
        if self.last_flushed_at is None:
            return self.first_pending_at + policy.group_wait
        return max(self.first_pending_at, self.last_flushed_at + policy.group_interval)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "key": self.key,
            "labels": dict(self.labels),
            "pending": [n.to_dict() for n in self.pending],
            "first_pending_at": _iso(self.first_pending_at),
            "last_flushed_at": _iso(self.last_flushed_at),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Group:
        """Inverse of ``to_dict`` (members as ``Notification.from_dict``); raises ValueError
        (pydantic's ValidationError) on a malformed dict."""
        return _GROUP.validate_python(dict(data))


@dataclass(frozen=True)
class GroupedNotification:
    """One message for the sinks carrying a batch of notifications, in arrival order.

    ``idempotency_key`` is ``group:`` plus a hash of the members' sorted idempotency keys, so
    the same batch always has the same key.
    """

    idempotency_key: str
    group_key: str
    labels: Mapping[str, str] = field(hash=False)
    notifications: tuple[Notification, ...]
    created_at: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", frozen_labels(self.labels))

    @property
    def severity(self) -> str:
        """The most severe member severity (critical > warning > info)."""
        return min(
            (n.severity for n in self.notifications), key=lambda s: _SEVERITY_ORDER.get(s, 9)
        )

    @property
    def firing(self) -> tuple[Notification, ...]:
        """Members announcing or repeating a firing alert."""
        return tuple(n for n in self.notifications if n.kind is not Kind.RESOLVED)

    @property
    def resolved(self) -> tuple[Notification, ...]:
        """Members announcing a recovery."""
        return tuple(n for n in self.notifications if n.kind is Kind.RESOLVED)

    @property
    def incident_id(self) -> str | None:
        """The incident the members belong to; None when none (or, never from
        :func:`step`, several) does."""
        ids = {n.incident_id for n in self.notifications}
        return ids.pop() if len(ids) == 1 else None

    @property
    def incident_role(self) -> str | None:
        """What the batch is to its incident: ``open`` or ``repage`` when a member pages
        (:class:`monitor.alerts.incidents.Role`), else ``close`` when a member closes it, else
        ``update``; None without an incident."""
        if self.incident_id is None:
            return None
        roles = {n.incident_role for n in self.notifications}
        return next((r for r in ("open", "repage", "close") if r in roles), "update")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (members as ``Notification.to_dict``), with the batch's
        ``incident_id`` and ``incident_role`` (None without an incident)."""
        return {
            "idempotency_key": self.idempotency_key,
            "group_key": self.group_key,
            "labels": dict(self.labels),
            "notifications": [n.to_dict() for n in self.notifications],
            "created_at": self.created_at.isoformat(),
            "incident_id": self.incident_id,
            "incident_role": self.incident_role,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupedNotification:
        """Inverse of ``to_dict`` (members as ``Notification.from_dict``; ``incident_id`` and
        ``incident_role`` are derived from them); raises ValueError (pydantic's
        ValidationError) on a malformed dict."""
        return _GROUPED.validate_python(dict(data))


_GROUP = TypeAdapter(Group)
_GROUPED = TypeAdapter(GroupedNotification)


@dataclass(frozen=True)
class GroupingResult:
    """What :func:`step` returns: the new groups, batches to send, notifications dropped."""

    groups: dict[str, Group]
    ready: list[GroupedNotification]
    superseded: list[Notification]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _merge(
    pending: tuple[Notification, ...], new: Notification
) -> tuple[tuple[Notification, ...], list[Notification]]:
    """Add ``new`` to a group's pending batch; returns (pending, superseded)."""
    if any(p.idempotency_key == new.idempotency_key for p in pending):
        return pending, []
    same = [p for p in pending if p.fingerprint == new.fingerprint and p.episode == new.episode]
    if new.kind is Kind.REPEAT and same:
        return pending, [new]
    if new.kind is Kind.RESOLVED and same:
        kept = tuple(p for p in pending if p not in same)
        never_heard = any(p.kind is Kind.FIRING and p.sequence == 0 for p in same)
        return (kept, [*same, new]) if never_heard else ((*kept, new), same)
    return (*pending, new), []


def step(
    groups: Mapping[str, Group],
    incoming: Iterable[Notification],
    policy: GroupingPolicy,
    now: datetime,
) -> GroupingResult:
    """Add ``incoming`` to their groups, then flush every group that is due at ``now``.

    Returns the new groups (the caller persists them), the batches to send (sorted by group
    key) and the superseded notifications. Raises ValueError for a naive ``now``.
    """
    require_aware(now, "now")
    out = dict(groups)
    superseded: list[Notification] = []
    for n in incoming:
        key, labels = policy.key(n.labels)
        g = out.get(key) or Group(key, labels)
        pending, dropped = _merge(g.pending, n)
        superseded.extend(dropped)
        first = g.first_pending_at if g.pending else now
        out[key] = Group(key, labels, pending, first if pending else None, g.last_flushed_at)
    ready: list[GroupedNotification] = []
    for key in sorted(out):
        g = out[key]
        due = g.due_at(policy)
        if due is not None and now >= due:
            digest = hashlib.blake2b(
                "\n".join(sorted(n.idempotency_key for n in g.pending)).encode(), digest_size=12
            ).hexdigest()
            ready.append(GroupedNotification(f"group:{digest}", key, g.labels, g.pending, now))
            out[key] = Group(key, g.labels, (), None, now)
        elif (
            not g.pending
            and g.last_flushed_at is not None
            and now >= g.last_flushed_at + policy.group_interval
        ) or (not g.pending and g.last_flushed_at is None):
            del out[key]
    return GroupingResult(out, ready, superseded)
