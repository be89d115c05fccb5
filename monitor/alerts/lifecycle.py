"""The alert state machine: one pure step per (rule, concrete scope) and evaluation.

Per fingerprint (:func:`monitor.alerts.states.fingerprint`): ``inactive -> pending -> firing
-> resolved -> pending ...``. :func:`evaluate` takes the stored state (None = never seen), the
observation and ``now`` and returns the next state and the notifications to enqueue; the caller
stores both in one transaction (outbox) and uses ``AlertState.version`` for compare-and-swap.

Rules of one step (``obs`` = observation, times are aware datetimes):

- No data (``obs.value is None`` or ``obs.samples < rule.min_samples``): the status holds and
  no breach timer advances: an alert is neither raised, confirmed nor resolved on missing
  evidence. A firing alert still gets its owed/repeat notifications.
- Breach (``rule.breached(value)``): inactive/resolved -> pending with ``active_since =
  obs.at``; pending -> firing once ``obs.at - active_since >= rule.for_`` (at once when
  ``for`` is 0 or the observation is ``confirmed`` by a sequential test). Entering firing
  starts a new episode (``fired_at = now``, counters reset, ack cleared).
- Not breached: pending -> inactive. Firing -> resolved (``resolved_at = now``) only when the
  observation's resolve value is back with the rule's margin (``rule.recovered``) at every
  evaluation with data for ``rule.keep_firing_for`` (timed from ``clear_since``); a value in
  between (not breached, not recovered) keeps it firing and restarts the period.
- Flapping (``rule.flapping``, :mod:`monitor.alerts.flapping`): each start or stop of firing
  is recorded in ``changes``; when the weighted share of changed slots reaches
  ``flapping.start`` the alert is marked flapping and ONE ``flapping`` notification says so
  and why; while marked, no firing, repeat or resolved notification is emitted; the mark
  clears when the share falls below ``flapping.stop``, and a still-firing alert whose episode
  was not announced then gets its ``firing`` notification.
- Notifications: while firing and not silenced and not acked, a ``firing`` notification is
  emitted when none was emitted in the episode yet or a silence has just ended; otherwise a
  ``repeat`` once ``now - last_notified_at >= rule.repeat_interval``. ``resolved`` is emitted
  once on recovery if the episode emitted anything and no silence matches now. A matching
  silence changes nothing but the emissions (and sets ``state.silenced``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from monitor.alerts.durations import format_duration
from monitor.alerts.flapping import changed_slots, flap_share
from monitor.alerts.rule_models import Rule
from monitor.alerts.silences import Ack, Silence, silenced_by
from monitor.alerts.states import (
    AlertState,
    Kind,
    Notification,
    Status,
    fingerprint,
    frozen_labels,
    require_aware,
)
from monitor.alerts.wording import flapping_summary, resolved_summary
from monitor.core.redact import redact, redact_secrets

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Observation:
    """The value of ``rule``'s metric for one concrete scope, measured over the window ending
    at ``at``.

    ``scope`` is the concrete segment (``agent``, ``domain``, ``tier``; None values dropped),
    ``samples`` the (weighted) sample count behind the value, ``value`` None when there is no
    data. ``estimate`` is the point estimate behind ``value`` when ``value`` is a bound (a rule
    with ``estimate: lower_bound``), else None. ``resolve_value`` is what a firing alert's
    recovery is judged on (the upper bound of a rule on a lower bound); None: ``value``.
    ``detail`` is optional free text for the notification (e.g. an excerpt); it is redacted
    like the rest. ``confirmed``: the breach comes from an always-valid sequential test, whose
    evidence already accumulated over time under its own false-alarm bound, so it fires at
    once whatever the rule's ``for``. Raises ValueError for a naive ``at``, negative
    ``samples`` or a non-finite ``value``.
    """

    rule: str
    scope: Mapping[str, str] = field(hash=False)
    value: float | None
    samples: float
    at: datetime
    detail: str | None = None
    resolve_value: float | None = None
    confirmed: bool = False
    estimate: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scope", frozen_labels(self.scope))
        require_aware(self.at, "Observation.at")
        if not self.samples >= 0:
            raise ValueError(f"samples must be >= 0, got {self.samples}")
        for name in ("value", "resolve_value", "estimate"):
            got = getattr(self, name)
            if got is not None and not math.isfinite(got):
                raise ValueError(f"{name} must be finite or None, got {got}")

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the alert this observation feeds."""
        return fingerprint(self.rule, self.scope)


def alert_labels(rule: Rule, scope: Mapping[str, str]) -> dict[str, str]:
    """Labels of an alert: rule labels, then scope, ``alertname``, ``severity``, ``metric``
    (later ones win, so a rule label cannot disguise the rule or its scope)."""
    return {
        **rule.labels,
        **scope,
        "alertname": rule.name,
        "severity": rule.severity.value,
        "metric": rule.metric.value,
    }


def render(template: str, context: Mapping[str, str]) -> str:
    """Replace ``{name}`` placeholders found in ``context``; leave any other text as is."""
    return _PLACEHOLDER.sub(lambda m: context.get(m.group(1), m.group(0)), template)


def _notification(
    rule: Rule, state: AlertState, kind: Kind, sequence: int, now: datetime, detail: str | None
) -> Notification:
    fired_at = state.fired_at
    assert fired_at is not None  # only called for an episode
    value = state.last_value
    estimate = state.last_estimate if value is not None else None
    shown = estimate if estimate is not None else value
    context = {
        "rule": rule.name,
        "value": "n/a" if value is None else f"{value:.4g}",
        "estimate": "n/a" if shown is None else f"{shown:.4g}",
        "threshold": f"{rule.threshold:g}",
        "samples": f"{state.last_samples:g}",
        **{k: state.scope.get(k, "all") for k in ("agent", "domain", "tier")},
    }
    clean = redact if rule.redact_customer_content else redact_secrets
    if kind is Kind.FLAPPING:
        policy = rule.flapping
        summary = flapping_summary(
            rule.name,
            state.scope,
            changed_slots(state.changes, now, policy),
            policy.slots,
            policy.slot,
            state.flap_share,
            policy.start,
            policy.stop,
        )
    elif kind is Kind.RESOLVED:  # what resolved it, not the firing template again
        summary = resolved_summary(
            rule.metric.value,
            rule.comparison.value,
            rule.threshold,
            value,
            state.scope,
            now - fired_at,
        )
    else:
        summary = render(rule.annotations.summary, context)
    return Notification(
        idempotency_key=f"{state.fingerprint}:{fired_at.isoformat()}:{kind.value}:{sequence}",
        kind=kind,
        sequence=sequence,
        fingerprint=state.fingerprint,
        rule=rule.name,
        metric=rule.metric.value,
        severity=rule.severity.value,
        scope=state.scope,
        labels=alert_labels(rule, state.scope),
        summary=clean(summary),
        description=clean(render(rule.annotations.description, context)),
        runbook_url=rule.annotations.runbook_url,
        value=value,
        threshold=rule.threshold,
        comparison=rule.comparison.value,
        samples=state.last_samples,
        window=format_duration(rule.window),
        fired_at=fired_at,
        resolved_at=state.resolved_at,
        created_at=now,
        acked_by=state.acked_by,
        detail=None if detail is None else clean(detail),
        estimate=estimate,
    )


def _track_flapping(
    rule: Rule, before: AlertState, cur: AlertState, now: datetime
) -> tuple[AlertState, bool]:
    """Record a start or stop of firing, age out old changes, update the flapping mark.

    Returns the state and whether the alert became flapping in this step."""
    policy = rule.flapping
    changes = cur.changes
    if (cur.status is Status.FIRING) != (before.status is Status.FIRING):
        changes = (*changes, now)
    horizon = policy.slot * policy.slots
    changes = tuple(c for c in changes if now - c < horizon)
    share = round(flap_share(changes, now, policy), 6) if changes else 0.0
    was = cur.flapping
    if not policy.enabled:
        flapping = False
    elif was:
        flapping = share >= policy.stop
    else:
        flapping = share >= policy.start
    cur = replace(cur, changes=changes, flap_share=share, flapping=flapping)
    return cur, flapping and not was


def evaluate(
    rule: Rule,
    state: AlertState | None,
    observation: Observation,
    now: datetime,
    silences: Iterable[Silence] = (),
) -> tuple[AlertState, list[Notification]]:
    """One evaluation step (see the module docstring for the rules).

    Returns the next state (``version`` incremented when anything changed; the same object
    when nothing did) and the notifications to deliver, in order. ``now`` is converted to UTC,
    so times in states and keys do not depend on the caller's time zone.

    Raises ValueError when ``now`` is naive, the observation is for another rule, or
    ``state`` belongs to another fingerprint.
    """
    require_aware(now, "now")
    now = now.astimezone(UTC)  # keys must not depend on the caller's time zone
    if observation.rule != rule.name:
        raise ValueError(f"observation for rule {observation.rule!r} given to {rule.name!r}")
    fp = observation.fingerprint
    if state is None:
        state = AlertState(fp, rule.name, observation.scope)
    elif state.fingerprint != fp:
        raise ValueError(f"state {state.fingerprint} is not the observation's {fp}")
    muted = silenced_by(silences, alert_labels(rule, state.scope), now) is not None
    value = observation.value
    has_data = value is not None and observation.samples >= rule.min_samples
    cur = state
    if has_data:
        cur = replace(
            cur,
            last_value=value,
            last_estimate=observation.estimate,
            last_samples=observation.samples,
            last_observed_at=observation.at,
        )
    out: list[Notification] = []
    resolved_now = False
    if has_data and value is not None and rule.breached(value):
        if cur.status in (Status.INACTIVE, Status.RESOLVED):
            cur = replace(cur, status=Status.PENDING, active_since=observation.at)
        since = cur.active_since
        if (
            cur.status is Status.PENDING
            and since is not None
            and (observation.at - since >= rule.for_ or observation.confirmed)
        ):
            cur = replace(
                cur,
                status=Status.FIRING,
                fired_at=now,
                resolved_at=None,
                notified=0,
                last_notified_at=None,
                acked_by=None,
                acked_at=None,
            )
        cur = replace(cur, clear_since=None)
    elif has_data and value is not None:
        if cur.status is Status.PENDING:
            cur = replace(cur, status=Status.INACTIVE, active_since=None)
        elif cur.status is Status.FIRING:
            back = observation.resolve_value if rule.resolve_on == "upper_bound" else None
            if rule.recovered(value if back is None else back):
                clear = cur.clear_since or observation.at
                if observation.at - clear >= rule.keep_firing_for:
                    cur = replace(
                        cur,
                        status=Status.RESOLVED,
                        active_since=None,
                        resolved_at=now,
                        clear_since=None,
                    )
                    resolved_now = True
                else:
                    cur = replace(cur, clear_since=clear)
            else:
                cur = replace(cur, clear_since=None)
    cur, flap_started = _track_flapping(rule, state, cur, now)
    if resolved_now:
        if cur.notified > 0 and not muted and not cur.flapping:
            out.append(_notification(rule, cur, Kind.RESOLVED, 0, now, observation.detail))
        cur = replace(cur, acked_by=None, acked_at=None)
    if flap_started and not muted and cur.fired_at is not None:
        out.append(_notification(rule, cur, Kind.FLAPPING, len(cur.changes), now, None))
    if cur.status is Status.FIRING and not muted and cur.acked_by is None and not cur.flapping:
        kind: Kind | None = None
        if cur.notified == 0 or cur.silenced:
            kind = Kind.FIRING
        elif cur.last_notified_at is None or now - cur.last_notified_at >= rule.repeat_interval:
            kind = Kind.REPEAT
        if kind is not None:
            out.append(_notification(rule, cur, kind, cur.notified, now, observation.detail))
            cur = replace(cur, notified=cur.notified + 1, last_notified_at=now)
    cur = replace(cur, silenced=muted)
    if cur == state:
        return state, out
    return replace(cur, version=state.version + 1), out


def acknowledge(state: AlertState, ack: Ack) -> AlertState:
    """Record ``ack`` on a firing alert: no repeat until it resolves (the ack is then cleared).

    Raises ValueError when the ack is for another fingerprint or the alert is not firing.
    """
    if ack.fingerprint != state.fingerprint:
        raise ValueError(f"ack for {ack.fingerprint} applied to {state.fingerprint}")
    if state.status is not Status.FIRING:
        raise ValueError(f"alert {state.fingerprint} is {state.status.value}, not firing")
    return replace(state, acked_by=ack.created_by, acked_at=ack.at, version=state.version + 1)
