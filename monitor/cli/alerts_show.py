"""``monitor alerts show ID``: one alert, from what fired to the conversations that show it.

Prints what fired (rule, scope, status, when, the summary of its firing notification), the
evidence (the value against the threshold when it fired and now, the interval, the sample size
and the window; "now" is the rule observed again at the time of the command), the exemplars of
its current or last episode (:mod:`monitor.alerts.exemplars`: one line each on why), and the
next commands (``monitor conversation <id>`` for each exemplar, the signal's own command, the
ack, the runbook). Every text taken from the store is redacted
(:func:`monitor.alerts.redact.redact`). ``ID`` is a fingerprint or a unique prefix of at least 4
characters, as ``monitor alerts ack`` takes. Exit codes: 0 shown, 1 no such alert, 2 bad
options, an invalid rules file, or no database.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from sqlalchemy import select

from monitor.alerts import exemplar_repo, repo
from monitor.alerts.durations import format_duration
from monitor.alerts.exemplars import PICK_RULES, Exemplar, conversation_command, pick_for
from monitor.alerts.metrics import CALIBRATION_METRICS, GATE_METRICS, Metric
from monitor.alerts.observations import observe
from monitor.alerts.redact import redact
from monitor.alerts.rules import RuleSet, load_alert_rules
from monitor.alerts.states import AlertState
from monitor.cli import analytics_common as ac
from monitor.config import load_settings
from monitor.core.errors import ConfigError
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


async def _firing_row(conn: Any, state: AlertState) -> dict[str, Any] | None:
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


async def gather(
    engine: ac.AsyncEngine, ident: str, rules: RuleSet, now: datetime
) -> dict[str, Any]:
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


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _when(x: datetime | None) -> str:
    return "-" if x is None else x.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def render(view: Mapping[str, Any]) -> list[str]:
    """The lines ``alerts show`` prints (rich markup, every stored text escaped)."""
    scope = ", ".join(f"{k}={v}" for k, v in view["scope"].items()) or "global"
    lines = [
        f"[bold]{escape(view['rule'])}[/] {escape(scope)}: [bold]{view['status']}[/]"
        + (f" ({view['severity']})" if view.get("severity") else "")
        + f"  fingerprint {view['fingerprint']}",
    ]
    if view.get("summary"):
        lines.append(f"  {escape(view['summary'])}")
    lines.append(
        f"  fired {_when(view['fired_at'])}"
        + (f", resolved {_when(view['resolved_at'])}" if view.get("resolved_at") else "")
        + (f", acked by {escape(view['acked_by'])}" if view.get("acked_by") else "")
        + (", flapping (notifications held)" if view.get("flapping") else "")
    )
    if not view["rule_known"]:
        lines.append("  (its rule is not in the rule set: no evidence or next commands)")
    else:
        ev = view["evidence"]
        cond = f"{view['comparison']} {view['threshold']:g}"
        bound = " (99% lower bound)" if view.get("estimate") == "lower_bound" else ""
        lines.append("[bold]Evidence[/]")
        if ev["when_fired"] is not None:
            lines.append(
                f"  when it fired: {view['metric']}{bound} {_num(ev['when_fired']['value'])} "
                f"({cond}), {_num(ev['last']['samples'])} samples at the last evaluation"
            )
        window = f"window {view['window']}" + (
            f" (evidence up to {view['evidence_window']})" if view.get("evidence_window") else ""
        )
        now = ev["now"]
        if now is None:
            lines.append(f"  now: no data ({window})")
        else:
            lines.append(
                f"  now: {view['metric']}{bound} {_num(now['value'])} ({cond}), "
                f"{_num(now['samples'])} samples, {window}"
            )
            if now.get("detail"):
                lines.append(f"  detail: {escape(now['detail'])}")
    lines.append(
        "[bold]Exemplars[/]" + (f" ({escape(view['pick_rule'])})" if view.get("pick_rule") else "")
    )
    if not view["exemplars"]:
        lines.append("  none stored for this episode")
    for x in view["exemplars"]:
        who = x["conversation_id"] or "-"
        lines.append(f"  {x['rank']}. {escape(who)}  {escape(x['reason'])}")
    if view.get("next"):
        lines.append("[bold]Next[/]")
        lines.extend(f"  {escape(c)}" for c in view["next"])
    return lines


def add_show_command(group: typer.Typer) -> None:
    """Add ``show`` to the ``alerts`` command group."""

    @group.command("show")
    def show(
        ident: str = typer.Argument(..., help="Fingerprint (or a unique prefix)."),
        rules_file: Path | None = typer.Option(
            None, "--file", "-f", help="Rules file (default: settings, else built-in)."
        ),
        as_json: bool = ac.JSON,
    ) -> None:
        """One alert: what fired, the evidence, its exemplars (one line each on why), the
        next commands."""
        try:
            rules = load_alert_rules(load_settings(), rules_file)[0]
        except ConfigError as exc:  # names the file and line
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from None
        now = datetime.now(UTC)

        async def go(eng: ac.AsyncEngine) -> dict[str, Any]:
            return await gather(eng, ident, rules, now)

        try:
            view = ac.run_with_engine(ac.console(), go, reads=True)
        except LookupError as exc:
            typer.echo(exc.args[0] if exc.args else str(exc), err=True)
            raise typer.Exit(1) from None
        if as_json:
            ac.print_json(view)
            return
        console = ac.console()
        for line in render(view):
            console.print(line, soft_wrap=True, highlight=False)
