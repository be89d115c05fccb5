"""``monitor alerts``: list alerts, silence and unsilence them, acknowledge, check the rules.

The rules come from ``settings.alert_rules_file`` when configured (``--file`` overrides it),
else the packaged default set. Exit codes: 0 done, 1 the target does not exist or is in the
wrong state (unknown fingerprint or silence id, ack of an alert that is not firing), 2 bad
options, an invalid rules file, or no database.
"""

from __future__ import annotations

import importlib
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from monitor.alerts import exemplar_repo, repo
from monitor.alerts.destinations import NO_DESTINATION, destinations
from monitor.alerts.exemplars import Exemplar, conversation_command
from monitor.alerts.incidents import Incident
from monitor.alerts.lifecycle import alert_labels
from monitor.alerts.rules import RuleSet, rules_to_dict
from monitor.alerts.silences import Ack, Silence, parse_matchers, silenced_by
from monitor.alerts.states import AlertState, Status
from monitor.cli import analytics_common as ac
from monitor.cli.alert_rules import load_rule_set
from monitor.cli.alert_rules import rules_or_exit as _rules_or_exit
from monitor.config import load_settings
from monitor.core.errors import ConfigError
from monitor.core.redact import redact

FILE = typer.Option(None, "--file", "-f", help="Rules file (default: settings, else built-in).")


def alert_row(
    state: AlertState,
    rules: RuleSet,
    silences: list[Silence],
    now: datetime,
    incident: str | None = None,
    exemplars: list[Exemplar] | None = None,
) -> dict[str, Any]:
    """One alert as shown by ``alerts list`` (JSON-ready); ``incident``: the id of the
    incident it belongs to; ``exemplars``: those of its current episode (redacted)."""
    try:
        rule = rules.rule(state.rule)
    except KeyError:
        rule = None
    silence = None
    if rule is not None:
        silence = silenced_by(silences, alert_labels(rule, state.scope), now)
    since = {
        Status.PENDING: state.active_since,
        Status.FIRING: state.fired_at,
        Status.RESOLVED: state.resolved_at,
    }.get(state.status)
    return {
        "fingerprint": state.fingerprint,
        "rule": state.rule,
        "status": state.status.value,
        "severity": None if rule is None else rule.severity.value,
        "scope": dict(state.scope),
        "value": state.last_value,
        "comparison": None if rule is None else rule.comparison.value,
        "threshold": None if rule is None else rule.threshold,
        "samples": state.last_samples,
        "since": since,
        "silenced": silence is not None or (rule is None and state.silenced),
        "silence_id": None if silence is None else silence.id,
        "acked_by": state.acked_by,
        "acked_at": state.acked_at,
        "flapping": state.flapping,
        "flap_share": state.flap_share,
        "incident": incident,
        "exemplars": [
            {
                "rank": e.rank,
                "conversation_id": redact(e.conversation_id),
                "reason": e.reason,
                "command": conversation_command(redact(e.conversation_id)),
            }
            for e in exemplars or []
            if e.conversation_id
        ],
    }


def first_looks(rows: list[dict[str, Any]]) -> list[str]:
    """One line per firing alert with exemplars: the command that prints its first
    exemplar's transcript, the alert and why that conversation (one step to a transcript)."""
    out = []
    for r in rows:
        if r["status"] == "firing" and r["exemplars"]:
            x = r["exemplars"][0]
            scope = ",".join(f"{k}={v}" for k, v in r["scope"].items()) or "global"
            out.append(f"{x['command']}   # {r['rule']} {redact(scope)}: {x['reason']}")
    return out


def incident_row(incident: Incident) -> dict[str, Any]:
    """One incident as shown by ``alerts list`` (JSON-ready)."""
    return {
        "id": incident.id,
        "key": incident.key,
        "status": incident.status,
        "severity": incident.severity,
        "opened_at": incident.opened_at,
        "resolved_at": incident.resolved_at,
        "alerts": [m.rule for m in incident.members],
        "firing": len(incident.firing),
        "pages": incident.pages,
        "updates": incident.updates,
    }


def incidents_table(rows: list[dict[str, Any]]) -> Table:
    """Incidents: key, status, severity, when opened and resolved, alerts, pages."""
    t = ac.titled_table(
        "incidents",
        (
            "incident",
            "key",
            "status",
            "severity",
            "opened (UTC)",
            "resolved (UTC)",
            "alerts",
            "pages",
        ),
    )
    for r in rows:
        resolved = r["resolved_at"]
        t.add_row(
            r["id"],
            escape(r["key"]),
            r["status"],
            r["severity"],
            r["opened_at"].strftime("%Y-%m-%d %H:%M:%S"),
            resolved.strftime("%Y-%m-%d %H:%M:%S") if resolved else "-",
            escape(", ".join(r["alerts"])) + f" ({r['firing']} firing)",
            f"{r['pages']} (+{r['updates']} updates)",
        )
    return t


def alerts_table(rows: list[dict[str, Any]]) -> Table:
    t = ac.titled_table(
        "alerts",
        (
            "fingerprint",
            "rule",
            "status",
            "severity",
            "scope",
            "value vs threshold",
            "samples",
            "since (UTC)",
            "silenced",
            "acked",
            "flapping",
            "incident",
        ),
    )
    for r in rows:
        scope = escape(",".join(f"{k}={v}" for k, v in r["scope"].items()) or "global")
        vs = f"{ac.fmt(r['value'], 4)} {r['comparison'] or '?'} {r['threshold']}"
        since = r["since"].strftime("%Y-%m-%d %H:%M:%S") if r["since"] else "-"
        t.add_row(
            r["fingerprint"],
            r["rule"],
            r["status"],
            r["severity"] or "-",
            scope,
            vs,
            f"{r['samples']:g}",
            since,
            r["silence_id"] or ("yes" if r["silenced"] else "no"),
            r["acked_by"] or "-",
            f"yes ({r.get('flap_share', 0):.2f}): held" if r.get("flapping") else "no",
            r.get("incident") or "-",
        )
    return t


def register(app: typer.Typer) -> None:
    """Add the ``alerts`` command group to ``app``."""
    group = typer.Typer(help="Alerts: list, silence, unsilence, ack, rules, test.")
    app.add_typer(group, name="alerts")

    @group.command("list")
    def list_(
        show_all: bool = typer.Option(False, "--all", help="Include resolved alerts."),
        rules_file: Path | None = FILE,
        as_json: bool = ac.JSON,
    ) -> None:
        """Firing, pending and flapping alerts: value against threshold, since, silenced,
        acked, flapping (notifications held), incident; then the open incidents (``--all``:
        also resolved ones) with their alerts and pages; then, per firing alert, the command
        that prints the transcript of the conversation that shows it best."""
        rules = _rules_or_exit(rules_file)
        now = datetime.now(UTC)

        async def go(eng: ac.AsyncEngine) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            async with eng.connect() as conn:
                states = await repo.list_states(conn)
                silences = await repo.active_silences(conn, now)
                found = await repo.list_incidents(conn, include_resolved=show_all)
            holder: dict[str, str] = {}
            for inc in reversed(found):  # open ones, then the newest, win
                holder |= {m.fingerprint: inc.id for m in inc.members}
            kept = [s for s in states if show_all or s.flapping or s.status is not Status.RESOLVED]
            async with eng.connect() as conn:
                stored = await exemplar_repo.load(
                    conn, [s.fingerprint for s in kept if s.status is Status.FIRING]
                )
            rows = [
                alert_row(
                    s,
                    rules,
                    silences,
                    now,
                    holder.get(s.fingerprint),
                    stored.get((s.fingerprint, s.fired_at), []) if s.fired_at else [],
                )
                for s in kept
            ]
            return rows, [incident_row(i) for i in found]

        rows, incidents = ac.run_with_engine(ac.console(), go, reads=True)
        sinks = destinations(load_settings())
        if as_json:
            ac.print_json({"alerts": rows, "incidents": incidents, "destinations": sinks})
            return
        if not rows:
            typer.echo("no alerts" if show_all else "no firing or pending alerts")
        else:
            ac.print_table(ac.console(), alerts_table(rows))
        if incidents:
            ac.print_table(ac.console(), incidents_table(incidents))
        looks = first_looks(rows)
        if looks:
            typer.echo(
                "conversations that show the firing alerts (monitor alerts show ID for all):"
            )
            for line in looks:
                typer.echo(f"  {line}")
        typer.echo(f"destinations: {', '.join(sinks)}" if sinks else NO_DESTINATION)

    @group.command("silence")
    def silence(
        matchers: str = typer.Argument(..., help="label=glob[,...], e.g. alertname=ece_*,agent=x"),
        duration: str | None = typer.Option(None, "--for", help="Length (30m, 2h, 1d)."),
        until: str | None = typer.Option(None, "--until", help="End, ISO 8601."),
        starts: str | None = typer.Option(None, "--starts", help="Start, ISO 8601 (default now)."),
        reason: str = typer.Option(..., "--reason", help="Why (shown to everyone)."),
        by: str = typer.Option(..., "--by", envvar="USER", help="Who (default: $USER)."),
        as_json: bool = ac.JSON,
    ) -> None:
        """Mute matching alerts for a while; prints the silence id."""
        try:
            parsed = parse_matchers(matchers)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="MATCHERS") from None
        start = ac.when(starts, "--starts") if starts else datetime.now(UTC)
        if (duration is None) == (until is None):
            raise typer.BadParameter("give exactly one of --for and --until")
        end = (
            start + ac.duration(duration, "--for") if duration else ac.when(until or "", "--until")
        )
        try:
            s = Silence(uuid.uuid4().hex, parsed, start, end, reason, by)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

        async def go(eng: ac.AsyncEngine) -> None:
            async with eng.begin() as conn:
                await repo.create_silence(conn, s)

        ac.run_with_engine(ac.console(), go)
        if as_json:
            ac.print_json(s.to_dict())
        else:
            typer.echo(f"silence {s.id} until {s.ends_at.isoformat()}")

    @group.command("silences")
    def silences(
        show_all: bool = typer.Option(False, "--all", help="Include ended silences."),
        as_json: bool = ac.JSON,
    ) -> None:
        """Silences that are active or scheduled (``--all``: also ended ones)."""
        now = datetime.now(UTC)

        async def go(eng: ac.AsyncEngine) -> list[Silence]:
            async with eng.connect() as conn:
                return await repo.list_silences(conn, now, include_ended=show_all)

        found = ac.run_with_engine(ac.console(), go, reads=True)
        if as_json:
            ac.print_json({"silences": [s.to_dict() for s in found]})
            return
        for s in found:
            ms = ",".join(f"{m.label}={m.pattern}" for m in s.matchers)
            typer.echo(
                f"{s.id}  {ms}  {s.starts_at:%Y-%m-%d %H:%M}..{s.ends_at:%Y-%m-%d %H:%M}"
                f"  by {s.created_by}: {s.reason}"
            )
        if not found:
            typer.echo("no silences")

    @group.command("unsilence")
    def unsilence(silence_id: str = typer.Argument(..., help="The silence id.")) -> None:
        """End a silence now (matching alerts page again at the next evaluation)."""
        now = datetime.now(UTC)

        async def go(eng: ac.AsyncEngine) -> Silence:
            async with eng.begin() as conn:
                return await repo.expire_silence(conn, silence_id, now)

        try:
            ended = ac.run_with_engine(ac.console(), go)
        except LookupError as exc:
            typer.echo(exc.args[0] if exc.args else str(exc), err=True)
            raise typer.Exit(1) from None
        typer.echo(f"silence {ended.id} ended at {ended.ends_at.isoformat()}")

    @group.command("ack")
    def ack(
        fingerprint: str = typer.Argument(
            ...,
            help="Fingerprint (or a unique prefix), or an incident id (inc-...): every firing "
            "alert of the incident not yet acknowledged.",
        ),
        by: str = typer.Option(..., "--by", envvar="USER", help="Who (default: $USER)."),
        comment: str = typer.Option("", "--comment", help="Why / what is being done."),
        rules_file: Path | None = FILE,
    ) -> None:
        """Acknowledge a firing alert, or every firing alert of an incident: no repeats until
        it resolves."""
        rules = _rules_or_exit(rules_file)
        now = datetime.now(UTC)

        def severity(rule: str) -> str:
            return rules.rule(rule).severity.value if _has(rules, rule) else ""

        async def go(eng: ac.AsyncEngine) -> list[AlertState]:
            async with eng.begin() as conn:
                if not fingerprint.startswith("inc-"):
                    state = await repo.find_state(conn, fingerprint)
                    given = Ack(state.fingerprint, by, now, comment)
                    return [await repo.ack(conn, given, severity(state.rule))]
                incident = await repo.find_incident(conn, fingerprint)
                members = [m.fingerprint for m in incident.members]
                states = await repo.load_states(conn, members)
                todo = [
                    s
                    for f in members
                    if (s := states.get(f)) is not None
                    and s.status.value == "firing"
                    and not s.acked_by
                ]
                if not todo:
                    raise ValueError(f"incident {incident.id} has no unacknowledged firing alert")
                acked = []
                for s in todo:
                    given = Ack(s.fingerprint, by, now, comment)
                    acked.append(await repo.ack(conn, given, severity(s.rule)))
                return acked

        try:
            done = ac.run_with_engine(ac.console(), go)
        except (LookupError, ValueError) as exc:
            typer.echo(exc.args[0] if exc.args else str(exc), err=True)
            raise typer.Exit(1) from None
        for d in done:
            typer.echo(f"acknowledged {d.fingerprint} ({d.rule}) by {d.acked_by}")

    @group.command("rules")
    def rules_cmd(rules_file: Path | None = FILE, as_json: bool = ac.JSON) -> None:
        """Validate and print the rules (errors name file:line:field; exit 2 when invalid)."""
        try:
            rules, source = load_rule_set(rules_file)
        except ConfigError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from None
        if as_json:
            ac.print_json({"source": source, **rules_to_dict(rules)})
            return
        t = ac.titled_table(
            f"{len(rules.rules)} rules from {source}",
            (
                "name",
                "metric",
                "scope",
                "condition",
                "window",
                "for",
                "min samples",
                "severity",
                "resolves",
            ),
        )
        for r in rules.rules:
            scope = ",".join(f"{k}={v}" for k, v in r.scope.model_dump(exclude_none=True).items())
            metric = r.metric.value + (f" ({r.test or r.category})" if r.test or r.category else "")
            d = rules_to_dict(RuleSet(rules=(r,)))["rules"][0]
            cond = f"{r.comparison.value} {r.threshold:g}"
            t.add_row(
                escape(r.name),
                escape(metric),
                escape(scope or "all"),
                cond,
                d["window"],
                d["for"],
                f"{r.min_samples:g}",
                r.severity.value,
                escape(r.resolution()),
            )
        ac.print_table(ac.console(), t)

    importlib.import_module("monitor.cli.alerts_backtest").add_backtest_command(group)
    importlib.import_module("monitor.cli.alerts_show").add_show_command(group)
    try:  # the delivery side adds `alerts test` (monitor/cli/alerts_send.py)
        test_module = importlib.import_module("monitor.cli.alerts_send")
    except ImportError:  # not in this checkout (yet)
        return
    test_module.add_test_command(group)


def _has(rules: RuleSet, name: str) -> bool:
    return any(r.name == name for r in rules.rules)
