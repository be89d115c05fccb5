"""``monitor alerts show ID``: one alert, from what fired to the conversations that show it.

Prints what :func:`monitor.alerts.alert_view.gather` finds: what fired (rule, scope, status,
when, the summary of its firing notification), the evidence (the value against the threshold
when it fired and now, the interval, the sample size and the window), the exemplars of its
current or last episode, one line each on why, and the next commands (``monitor conversation
<id>`` for each exemplar first). ``ID`` is a fingerprint or a unique prefix of at least 4
characters, as ``monitor alerts ack`` takes, or an incident id (``inc-`` and at least 4 of its
hex digits, as ``monitor alerts list`` shows): the incident, then each of its alerts as above.
Exit codes: 0 shown, 1 no such alert or incident, 2 bad options, an invalid rules file, or no
database.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from monitor.alerts.alert_view import gather, gather_incident
from monitor.alerts.rules import load_alert_rules
from monitor.cli import analytics_common as ac
from monitor.config import load_settings
from monitor.core.errors import ConfigError


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


def render_incident(view: Mapping[str, Any]) -> list[str]:
    """The lines ``alerts show inc-...`` prints: the incident, each alert indented, next."""
    inc = view["incident"]
    lines = [
        f"[bold]incident {inc['id']}[/] {escape(inc['key'])}: [bold]{inc['status']}[/] "
        f"({inc['severity']})",
        f"  opened {_when(inc['opened_at'])}"
        + (f", resolved {_when(inc['resolved_at'])}" if inc.get("resolved_at") else "")
        + f"; {inc['pages']} page(s), {inc['updates']} update(s), "
        f"{len(view['alerts'])} alert(s), {len(inc['firing'])} firing",
    ]
    for alert in view["alerts"]:
        lines.append("")
        if alert.get("missing"):
            lines.append(
                f"  {escape(alert['rule'])}  fingerprint {alert['fingerprint']}: "
                "its state is no longer stored"
            )
            continue
        lines.extend(f"  {line}" for line in render(alert))
    if view.get("next"):
        lines.extend(["", "[bold]Next for the incident[/]"])
        lines.extend(f"  {escape(c)}" for c in view["next"])
    return lines


def add_show_command(group: typer.Typer) -> None:
    """Add ``show`` to the ``alerts`` command group."""

    @group.command("show")
    def show(
        ident: str = typer.Argument(
            ..., help="Fingerprint (or a unique prefix), or an incident id (inc-...)."
        ),
        rules_file: Path | None = typer.Option(
            None, "--file", "-f", help="Rules file (default: settings, else built-in)."
        ),
        as_json: bool = ac.JSON,
    ) -> None:
        """One alert: what fired, the evidence, its exemplars (one line each on why), the
        next commands. Given an incident id (inc-...): the incident and each of its alerts."""
        try:
            rules = load_alert_rules(load_settings(), rules_file)[0]
        except ConfigError as exc:  # names the file and line
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from None
        now = datetime.now(UTC)

        async def go(eng: ac.AsyncEngine) -> dict[str, Any]:
            if ident.startswith("inc-"):
                return await gather_incident(eng, ident, rules, now)
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
        for line in render_incident(view) if "incident" in view else render(view):
            console.print(line, soft_wrap=True, highlight=False)
