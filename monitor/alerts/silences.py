"""Silences (mute matching alerts for a while, with a reason) and acknowledgements.

Pure. A silence matches an alert's labels: ``alertname`` (the rule name), ``severity``,
``metric``, the scope (``agent``, ``domain``, ``tier``) and the rule's own labels (see
:func:`monitor.alerts.lifecycle.alert_labels`). Silenced alerts still change state; they only
emit nothing (:func:`monitor.alerts.lifecycle.evaluate`). An ``Ack`` says a human owns the
current firing episode: it stops repeats until the alert resolves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from pydantic import TypeAdapter

from monitor.alerts.states import require_aware


@dataclass(frozen=True)
class Matcher:
    """``label`` must exist and its value match the fnmatch glob ``pattern`` (case-sensitive).

    The pattern ``*`` also matches a missing label.
    """

    label: str
    pattern: str

    def __post_init__(self) -> None:
        if not self.label or not self.pattern:
            raise ValueError("a matcher needs a label and a pattern")

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfies this matcher."""
        got = labels.get(self.label)
        if got is None:
            return self.pattern == "*"
        return fnmatchcase(got, self.pattern)


def parse_matchers(text: str) -> tuple[Matcher, ...]:
    """Parse ``alertname=ece_*,agent=billing`` (the CLI form) into matchers.

    Whitespace around names and patterns is ignored. Raises ValueError on an empty text or a
    part without ``=``.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError("at least one matcher label=glob is required")
    out = []
    for part in parts:
        label, sep, pattern = part.partition("=")
        if not sep or not label.strip() or not pattern.strip():
            raise ValueError(f"matcher {part!r} is not label=glob")
        out.append(Matcher(label.strip(), pattern.strip()))
    return tuple(out)


@dataclass(frozen=True)
class Silence:
    """Mute every alert whose labels satisfy all ``matchers`` during ``[starts_at, ends_at)``.

    Raises ValueError when there is no matcher, the reason or author is blank, a time is
    naive, or ``ends_at < starts_at`` (equal times: an empty silence, never active).
    """

    id: str
    matchers: tuple[Matcher, ...]
    starts_at: datetime
    ends_at: datetime
    reason: str
    created_by: str

    def __post_init__(self) -> None:
        if not self.matchers:
            raise ValueError("a silence needs at least one matcher")
        if not self.reason.strip():
            raise ValueError("a silence needs a reason")
        if not self.created_by.strip():
            raise ValueError("a silence needs created_by")
        require_aware(self.starts_at, "starts_at")
        require_aware(self.ends_at, "ends_at")
        if self.ends_at < self.starts_at:
            raise ValueError("ends_at must not be before starts_at")

    def active(self, now: datetime) -> bool:
        """True while ``starts_at <= now < ends_at``."""
        return self.starts_at <= now < self.ends_at

    def matches(self, labels: Mapping[str, str], now: datetime) -> bool:
        """True when the silence is active at ``now`` and every matcher matches ``labels``."""
        return self.active(now) and all(m.matches(labels) for m in self.matchers)

    def expire(self, now: datetime) -> Silence:
        """This silence ended at ``now`` (``unsilence``): a copy with ``ends_at = now``.

        Unchanged if it already ended; one that has not started yet gets ``ends_at =
        starts_at``, an empty interval, so it never becomes active.
        """
        require_aware(now, "now")
        if now >= self.ends_at:
            return self
        return replace(self, ends_at=max(now, self.starts_at))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; matchers as ``[{"label": ..., "pattern": ...}]``."""
        return {
            "id": self.id,
            "matchers": [{"label": m.label, "pattern": m.pattern} for m in self.matchers],
            "starts_at": self.starts_at.isoformat(),
            "ends_at": self.ends_at.isoformat(),
            "reason": self.reason,
            "created_by": self.created_by,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Silence:
        """Inverse of ``to_dict``; raises ValueError (pydantic's ValidationError) on a malformed
        dict or one ``__post_init__`` rejects."""
        return _SILENCE.validate_python(dict(data))


def silenced_by(
    silences: Iterable[Silence], labels: Mapping[str, str], now: datetime
) -> Silence | None:
    """The first silence that mutes ``labels`` at ``now``, or None."""
    return next((s for s in silences if s.matches(labels, now)), None)


@dataclass(frozen=True)
class Ack:
    """A human acknowledged the firing alert ``fingerprint`` at ``at``.

    Applied with :func:`monitor.alerts.lifecycle.acknowledge`. Raises ValueError when
    ``created_by`` is blank or ``at`` is naive.
    """

    fingerprint: str
    created_by: str
    at: datetime
    comment: str = ""

    def __post_init__(self) -> None:
        if not self.created_by.strip():
            raise ValueError("an ack needs created_by")
        require_aware(self.at, "at")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "fingerprint": self.fingerprint,
            "created_by": self.created_by,
            "at": self.at.isoformat(),
            "comment": self.comment,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ack:
        """Inverse of ``to_dict``; a missing ``comment`` is ``""``. Raises ValueError (pydantic's
        ValidationError) on a malformed dict or one ``__post_init__`` rejects."""
        return _ACK.validate_python(dict(data))


_SILENCE = TypeAdapter(Silence)
_ACK = TypeAdapter(Ack)
