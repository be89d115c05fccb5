"""One alert as a person reads it: what fired, the evidence, its exemplars, the next commands.

:func:`gather` reads the alert (a fingerprint or a unique prefix), the history row of its
episode's firing notification, the episode's exemplars (:mod:`monitor.alerts.exemplar_repo`),
and observes its rule again at ``now`` (:func:`monitor.alerts.observations.observe`); it returns
a JSON-ready dict (``monitor alerts show`` prints it, ``--json`` as is). Every text taken from
the store is redacted (:func:`monitor.core.redact.redact`). :func:`gather_incident` does the
same for an incident (an id ``inc-...`` or a unique prefix): the incident, then each member.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from monitor.alerts import exemplar_repo, repo
from monitor.alerts.durations import format_duration
from monitor.alerts.exemplars import PICK_RULES, Exemplar, conversation_command, pick_for
from monitor.alerts.metrics import CALIBRATION_METRICS, GATE_METRICS, Metric
from monitor.alerts.observations import observe
from monitor.alerts.rule_models import RuleSet
from monitor.alerts.states import AlertState
from monitor.core.redact import redact
from monitor.store.tables_alerts import alert_history

#: the command that shows each signal, with ``{scope}`` options and ``{since}``
_SIGNAL_COMMANDS: Mapping[Metric, str] = {
    **{m: "monitor calibration {scope} --since {since}" for m in CALIBRATION_METRICS},
    Metric.DRIFT: "monitor drift {scope} --recent {window}",
    Metric.ESCALATION_INVERSION: "monitor escalation {scope} --since {since}",
    Metric.TIME_TO_ESCALATION_P90_S: "monitor escalation {scope} --since {since}",
    Metric.JUDGE_FAILURE_RATE: "monitor judges {agent} --since {since}",
    **{m: "monitor gate {agent} --since {since}" for m in GATE_METRICS},
}


def _scope_options(scope: Mapping[str, str]) -> str:
    parts = [
        f"--{k} {shlex.quote(redact(scope[k]))}" for k in ("agent", "domain", "tier") if k in scope
    ]
    return " ".join(parts)


def next_commands(
    state: AlertState,
    metric: Metric,
    window: str,
    exemplars: Sequence[Exemplar],
    runbook: str | None,
) -> list[str]:
    """What to run next: each exemplar's conversation, the signal's command, the ack of a
    firing alert, the runbook."""
    out = [conversation_command(redact(e.conversation_id)) for e in exemplars if e.conversation_id]
    template = _SIGNAL_COMMANDS.get(metric)
    if template is not None:
        agent = state.scope.get("agent")
        out.append(
            template.format(
                scope=_scope_options(state.scope),
                agent=f"--agent {shlex.quote(redact(agent))}" if agent else "",
                since=window,
                window=window,
            ).replace("  ", " ")
        )
    if state.status.value == "firing" and not state.acked_by:
        out.append(f"monitor alerts ack {state.fingerprint} --comment '...'")
    if runbook:
        out.append(f"runbook: {runbook}")
    return out


async def _firing_row(conn: AsyncConnection, state: AlertState) -> dict[str, Any] | None:
    """The history row of the episode's firing notification (None when never fired)."""
    if state.fired_at is None:
        return None
    key = f"{state.fingerprint}:{state.fired_at.isoformat()}:firing:0"
    q = select(alert_history).where(alert_history.c.idempotency_key == key)
    row = (await conn.execute(q)).mappings().first()
    return None if row is None else dict(row)


def _evidence_now(observation: Any, window: str) -> dict[str, Any] | None:
    if observation is None:
        return None
    return {
        "at": observation.at,
        "value": observation.value,
        "resolve_value": observation.resolve_value,
        "samples": observation.samples,
        "detail": None if observation.detail is None else redact(observation.detail),
        "window": window,
    }


async def gather(engine: AsyncEngine, ident: str, rules: RuleSet, now: datetime) -> dict[str, Any]:
    """Everything ``alerts show`` prints, JSON-ready (raises LookupError: no such alert)."""
    async with engine.connect() as conn:
        state = await repo.find_state(conn, ident)
        fired = await _firing_row(conn, state)
        stored = await exemplar_repo.load(conn, [state.fingerprint])
    found = (
        stored.get((state.fingerprint, state.fired_at), []) if state.fired_at is not None else []
    )
    rule = next((r for r in rules.rules if r.name == state.rule), None)
    out: dict[str, Any] = {
        "fingerprint": state.fingerprint,
        "rule": state.rule,
        "status": state.status.value,
        "scope": {k: redact(v) for k, v in state.scope.items()},
        "fired_at": state.fired_at,
        "resolved_at": state.resolved_at,
        "acked_by": state.acked_by,
        "flapping": state.flapping,
        "summary": None if fired is None else redact(str(fired["summary"])),
        "exemplars": [
            {
                "rank": e.rank,
                "conversation_id": None if e.conversation_id is None else redact(e.conversation_id),
                "reason": redact(e.reason),
                "command": None
                if e.conversation_id is None
                else conversation_command(redact(e.conversation_id)),
            }
            for e in found
        ],
    }
    if rule is None:
        out.update(rule_known=False, evidence=None, next=[])
        return out
    window = format_duration(rule.window)
    evidence_window = None if rule.evidence is None else format_duration(rule.evidence.max_window)
    observations = await observe(engine, RuleSet(rules=(rule,)), now)
    now_obs = next((o for o in observations if o.fingerprint == state.fingerprint), None)
    out.update(
        rule_known=True,
        metric=rule.metric.value,
        severity=rule.severity.value,
        comparison=rule.comparison.value,
        threshold=rule.threshold,
        window=window,
        evidence_window=evidence_window,
        estimate=rule.estimate,
        pick_rule=PICK_RULES[pick_for(rule.metric)],
        evidence={
            "when_fired": None
            if fired is None
            else {"at": fired["at"], "value": fired["value"], "threshold": fired["threshold"]},
            "last": {
                "at": state.last_observed_at,
                "value": state.last_value,
                "samples": state.last_samples,
            },
            "now": _evidence_now(now_obs, window),
        },
        next=next_commands(state, rule.metric, window, found, rule.annotations.runbook_url),
    )
    return out


async def gather_incident(
    engine: AsyncEngine, ident: str, rules: RuleSet, now: datetime
) -> dict[str, Any]:
    """An incident as ``alerts show inc-...`` prints it, JSON-ready: the incident, then each
    member alert as :func:`gather` gives it, in the order they joined, and what to run next
    (raises LookupError: no such incident)."""
    async with engine.connect() as conn:
        incident = await repo.find_incident(conn, ident)
    alerts: list[dict[str, Any]] = []
    for member in incident.members:
        try:
            alerts.append(await gather(engine, member.fingerprint, rules, now))
        except LookupError:  # its state was deleted (retention): the membership still shows
            alerts.append({"fingerprint": member.fingerprint, "rule": member.rule, "missing": True})
    firing_unacked = [
        a["fingerprint"] for a in alerts if a.get("status") == "firing" and not a.get("acked_by")
    ]
    conversations = [
        x["command"] for a in alerts for x in a.get("exemplars", []) if x.get("command")
    ]
    nxt = list(dict.fromkeys(conversations))[:3]
    if firing_unacked:
        nxt.append(f"monitor alerts ack {incident.id} --comment '...'")
    return {
        "incident": {
            "id": incident.id,
            "key": redact(incident.key),
            "status": incident.status,
            "severity": incident.severity,
            "opened_at": incident.opened_at,
            "resolved_at": incident.resolved_at,
            "pages": incident.pages,
            "updates": incident.updates,
            "firing": list(incident.firing),
        },
        "alerts": alerts,
        "next": nxt,
    }
