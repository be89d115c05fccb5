"""Values the alert lifecycle stores and emits: fingerprints, ``AlertState``, ``Notification``.

Pure. Every value is a frozen dataclass with ``to_dict`` (JSON-ready: datetimes as ISO 8601
strings with offset, enums as their string values, mappings as plain dicts) and ``from_dict``
(its exact inverse: ``X.from_dict(x.to_dict()) == x``), so a store can keep them in a JSONB
column and an outbox can carry a notification verbatim. ``from_dict`` validates with a pydantic
``TypeAdapter`` of the dataclass (``__post_init__`` runs; a time keeps its offset, as pydantic's
fixed-offset tzinfo, so it is equal and formats the same).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from pydantic import TypeAdapter


def fingerprint(rule: str, scope: Mapping[str, object]) -> str:
    """Stable id of one alert: the rule name plus its concrete scope (16 hex characters).

    Scope values are compared as strings and ``None`` values are dropped, so
    ``{"tier": 3}`` and ``{"tier": "3", "domain": None}`` give the same fingerprint. Algorithm
    (stable across processes and versions): BLAKE2b, 8-byte digest, over the compact JSON of
    ``[rule, [[key, value], ...] sorted by key]``.
    """
    pairs = sorted((str(k), str(v)) for k, v in scope.items() if v is not None)
    canonical = json.dumps([rule, pairs], separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(canonical.encode(), digest_size=8).hexdigest()


def frozen_labels(labels: Mapping[str, object]) -> Mapping[str, str]:
    """A read-only, key-sorted copy with string values and ``None`` values dropped."""
    return MappingProxyType({str(k): str(v) for k, v in sorted(labels.items()) if v is not None})


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def require_aware(value: datetime, name: str) -> None:
    """Raise ValueError unless ``value`` is timezone-aware (naive times are ambiguous)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")


class Status(StrEnum):
    """Lifecycle status of one fingerprint."""

    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


class Kind(StrEnum):
    """What a notification announces. ``repeat`` is a reminder of a still-firing alert;
    ``flapping`` says the alert keeps starting and stopping and its notifications are held."""

    FIRING = "firing"
    REPEAT = "repeat"
    RESOLVED = "resolved"
    FLAPPING = "flapping"


@dataclass(frozen=True)
class AlertState:
    """Everything the lifecycle needs to remember about one fingerprint between evaluations.

    - ``active_since``: start of the current breach (set in pending and firing).
    - ``fired_at`` / ``resolved_at``: the current or last episode's times (an episode is one
      pending->firing->resolved run; ``fired_at`` identifies it in idempotency keys).
    - ``notified``: firing/repeat notifications emitted in this episode (the next one's
      sequence number); ``last_notified_at``: when the last of them was emitted.
    - ``silenced``: a silence matched at the last evaluation (the page is owed when it ends).
    - ``acked_by`` / ``acked_at``: acknowledgement of this episode (cleared on resolve).
    - ``clear_since``: while firing, since when every evaluation with data has been back with
      confidence (the resolve period of ``keep_firing_for`` runs from it); None otherwise.
    - ``changes``: when the alert started or stopped firing, within the flap window.
    - ``flapping``: marked flapping (notifications held); ``flap_share``: the weighted share of
      changed slots at the last evaluation.
    - ``last_value`` / ``last_estimate`` / ``last_samples``: the last evaluation with data: the
      value the rule compares, the point estimate behind it when that value is a bound (else
      None), the sample size.
    - ``version``: incremented on every change, for compare-and-swap in a shared store.
    """

    fingerprint: str
    rule: str
    scope: Mapping[str, str] = field(hash=False)
    status: Status = Status.INACTIVE
    active_since: datetime | None = None
    fired_at: datetime | None = None
    resolved_at: datetime | None = None
    last_notified_at: datetime | None = None
    notified: int = 0
    silenced: bool = False
    acked_by: str | None = None
    acked_at: datetime | None = None
    last_value: float | None = None
    last_estimate: float | None = None
    last_samples: float = 0.0
    last_observed_at: datetime | None = None
    clear_since: datetime | None = None
    changes: tuple[datetime, ...] = ()
    flapping: bool = False
    flap_share: float = 0.0
    version: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scope", frozen_labels(self.scope))
        object.__setattr__(self, "status", Status(self.status))

    @classmethod
    def new(cls, rule: str, scope: Mapping[str, object]) -> AlertState:
        """The inactive state of a fingerprint never seen before."""
        labels = frozen_labels(scope)
        return cls(fingerprint(rule, labels), rule, labels)

    @property
    def episode(self) -> str | None:
        """``<fingerprint>:<fired_at ISO>`` of the current/last episode; None if never fired."""
        return None if self.fired_at is None else f"{self.fingerprint}:{self.fired_at.isoformat()}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (see module docstring): every field, times as ISO 8601 strings."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AlertState:
        """Inverse of ``to_dict``; a missing optional key takes the field's default (a dict
        stored before the field existed). Raises ValueError (pydantic's ValidationError) on a
        malformed dict."""
        return _STATE.validate_python(dict(data))


@dataclass(frozen=True)
class Notification:
    """One message for the sinks, self-contained (a sink needs no rule lookup).

    ``idempotency_key`` is ``<fingerprint>:<fired_at ISO>:<kind>:<sequence>``: the same
    notification always has the same key, so a receiver or an outbox can drop repeats.
    ``sequence`` counts firing/repeat notifications within the episode (0 for the first);
    ``resolved`` has sequence 0. ``labels`` holds ``alertname``, ``severity``, ``metric``,
    the scope and the rule's labels (rule labels never override those). Text fields are
    rendered and, unless the rule opted out, redacted. ``value`` is None only for resolved
    notifications without data; it is what the rule compares with ``threshold``: for a rule on
    a bound (``estimate: lower_bound``) the bound, and then ``estimate`` is the point estimate
    behind it (None for a rule that compares the estimate itself). Times are aware datetimes.

    ``incident_id`` / ``incident_role``: the incident the alert belongs to and what this
    notification is to it (``open``, ``repage``, ``update``, ``close``;
    :mod:`monitor.alerts.incidents`), set by the evaluation after the lifecycle step (None
    before it, and for an alert that joined no incident); the incident id is then also the
    label ``incident``.
    """

    idempotency_key: str
    kind: Kind
    sequence: int
    fingerprint: str
    rule: str
    metric: str
    severity: str
    scope: Mapping[str, str] = field(hash=False)
    labels: Mapping[str, str] = field(hash=False)
    summary: str
    description: str
    runbook_url: str | None
    value: float | None
    threshold: float
    comparison: str
    samples: float
    window: str
    fired_at: datetime
    resolved_at: datetime | None
    created_at: datetime
    acked_by: str | None = None
    detail: str | None = None
    incident_id: str | None = None
    incident_role: str | None = None
    estimate: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scope", frozen_labels(self.scope))
        object.__setattr__(self, "labels", frozen_labels(self.labels))
        object.__setattr__(self, "kind", Kind(self.kind))

    @property
    def episode(self) -> str:
        """``<fingerprint>:<fired_at ISO>``: threads a resolved message under its firing one."""
        return f"{self.fingerprint}:{self.fired_at.isoformat()}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (see module docstring)."""
        return {
            "idempotency_key": self.idempotency_key,
            "kind": self.kind.value,
            "sequence": self.sequence,
            "fingerprint": self.fingerprint,
            "rule": self.rule,
            "metric": self.metric,
            "severity": self.severity,
            "scope": dict(self.scope),
            "labels": dict(self.labels),
            "summary": self.summary,
            "description": self.description,
            "runbook_url": self.runbook_url,
            "value": self.value,
            "threshold": self.threshold,
            "comparison": self.comparison,
            "samples": self.samples,
            "window": self.window,
            "fired_at": self.fired_at.isoformat(),
            "resolved_at": _iso(self.resolved_at),
            "created_at": self.created_at.isoformat(),
            "acked_by": self.acked_by,
            "detail": self.detail,
            "incident_id": self.incident_id,
            "incident_role": self.incident_role,
            "estimate": self.estimate,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Notification:
        """Inverse of ``to_dict``; a missing ``acked_by``, ``detail``, ``incident_id``,
        ``incident_role`` or ``estimate`` is None. Raises ValueError (pydantic's
        ValidationError) on a malformed dict."""
        return _NOTIFICATION.validate_python(dict(data))


_STATE = TypeAdapter(AlertState)
_NOTIFICATION = TypeAdapter(Notification)


def _plain(value: object) -> object:
    """A field's JSON value: times as ISO 8601 strings, the status as its value, tuples as
    lists, mappings as dicts."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Status):
        return value.value
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value
