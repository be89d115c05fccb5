"""``monitor config``: the effective settings (secrets masked, each value's source), and the
settings reference docs/configuration.md generated from the declarations of ``Settings``.

Each setting belongs to one group (:data:`GROUPS`, matched by exact name first, then by name
prefix); a setting no group claims is listed under "Other settings" and named on standard error
when the reference is generated, so that it gets a group.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from pydantic.fields import FieldInfo
from rich.markup import escape
from rich.table import Table

from monitor.cli import analytics_common as ac
from monitor.config import Settings, env_file, env_names, load_settings, setting_sources
from monitor.core.fields import is_secret
from monitor.stack import endpoints

DOC_PATH = "docs/configuration.md"
MASK = "********"
# the password of a URL's user info: scheme://user:PASSWORD@host
URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@/\s]+@", re.I)


@dataclass(frozen=True)
class Group:
    """A concern the reference groups settings by: claimed by exact name, then by prefix."""

    title: str
    intro: str
    names: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()


GROUPS: tuple[Group, ...] = (
    Group(
        "Broker and database",
        "Unset `MONITOR_KAFKA_BOOTSTRAP` and `DATABASE_URL` mean embedded: `monitor up` (and "
        "`make demo`) start the Tansu broker and a private Postgres under `MONITOR_STATE_DIR`, "
        "and the commands run beside it find them through `.monitor/endpoints.json`.",
        names=(
            "kafka_bootstrap",
            "kafka_idempotent",
            "database_url",
            "database_read_url",
            "state_dir",
            "app_id",
            "consumer_group",
        ),
        prefixes=("topic_",),
    ),
    Group(
        "Ingest",
        "The batched Kafka consumer and the worker's web server (`POST /v1/events`, `GET "
        "/metrics`, `GET /health`): batches, backoff, limits, timeouts. An event is at most "
        "256 KiB and its `attributes` at most 16 KiB (fixed by the contract). What each "
        "limit answers: [robustness.md](robustness.md#6-http-refuse-before-working).",
        names=(
            "batch_max_events",
            "batch_max_wait_ms",
            "fetch_max_wait_ms",
            "writes_in_flight",
            "max_future_skew_s",
            "health_stall_s",
            "commit_timeout_s",
            "web_host",
            "web_port",
            "sampling_file",
        ),
        prefixes=("store_retry_", "http_"),
    ),
    Group(
        "OpenTelemetry (OTLP)",
        "`POST /v1/traces` and the traces topic: which span attributes and tool names mean "
        "confidence and escalation, and how long spans wait for their trace "
        "([otel.md](otel.md)).",
        names=("topic_traces", "otlp_grpc_port"),
        prefixes=("otel_",),
    ),
    Group(
        "Judges",
        "The judge scheduler and workers, and the optional LLM judge on any OpenAI-compatible "
        "endpoint ([analytics.md](analytics.md), [robustness.md](robustness.md)).",
        names=("topic_judge_requests", "domains_dir"),
        prefixes=("judge_", "llm_judge_"),
    ),
    Group(
        "Drift",
        "The worker's periodic drift checks against each segment's pinned reference "
        "([analytics.md](analytics.md); reading a drift alert: [runbooks.md](runbooks.md)).",
        prefixes=("drift_",),
    ),
    Group(
        "Alerts and sinks",
        "Rule evaluation and delivery ([default rules](../monitor/alerts/default_rules.yaml), "
        "[runbooks.md](runbooks.md)). A worker with no alert destination (none of the Slack, "
        "webhook or Alertmanager settings) logs a warning when it starts, and `monitor alerts "
        'list` says "no destination": alerts are then evaluated and recorded, but nobody is '
        "paged.",
        names=(
            "alerting_enabled",
            "alert_rules_file",
            "alert_exemplars",
            "alertmanager_url",
            "dashboard_url",
        ),
        prefixes=("slack_", "webhook_", "notify_"),
    ),
    Group(
        "Grafana dashboards",
        "`monitor dashboards push` (`--url` overrides the URL).",
        prefixes=("grafana_",),
    ),
    Group(
        "Gate",
        "The runtime trust gate, `monitor gate serve` and `POST /v1/gate` ([gate.md](gate.md)).",
        names=("http_gate_rate_per_s", "http_gate_rate_burst"),
        prefixes=("gate_",),
    ),
    Group(
        "Retention",
        "What the worker's retention job keeps, in whole UTC days unless named otherwise; `0` "
        "keeps forever ([scaling.md](scaling.md)).",
        names=("partitions_ahead_days",),
        prefixes=("retention_",),
    ),
    Group(
        "Security",
        "Shared tokens (the development mode) beside the scoped API keys of `monitor keys`, "
        "and the limits on failed authentication ([robustness.md](robustness.md#10-threat-model"
        "-who-holds-which-key)).",
        names=(
            "ingest_token",
            "api_token",
            "gate_token",
            "gate_origin_key",
            "keys_refresh_s",
            "keys_miss_refresh_s",
            "http_unauth_rate_per_s",
            "http_unauth_rate_burst",
            "http_rate_max_keys",
        ),
    ),
)
OTHER = Group("Other settings", "Settings no group of `monitor/cli/config.py` claims yet.")


def group_of(name: str) -> Group:
    """The group that claims setting ``name``: by exact name, else by the longest prefix."""
    for group in GROUPS:
        if name in group.names:
            return group
    claims = [(len(p), g) for g in GROUPS for p in g.prefixes if name.startswith(p)]
    return max(claims, key=lambda c: c[0])[1] if claims else OTHER


def grouped() -> list[tuple[Group, list[str]]]:
    """The settings by group, in :data:`GROUPS` order, then :data:`OTHER` when it has any;
    inside a group those it names in its order, then the others in declaration order."""
    members: dict[str, list[str]] = {}
    for name in Settings.model_fields:
        members.setdefault(group_of(name).title, []).append(name)
    found = []
    for group in (*GROUPS, OTHER):
        names = members.get(group.title, [])
        named = [n for n in group.names if n in names]
        if names:
            found.append((group, named + [n for n in names if n not in named]))
    return found


def type_name(field: FieldInfo) -> str:
    """The field's type in words, with its bounds: ``int, >= 1``, ``path``, ``string, secret``."""
    annotation: Any = field.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = args[0] if len(args) == 1 else annotation
    words: dict[Any, str] = {str: "string", int: "int", float: "float", bool: "bool", Path: "path"}
    text = words.get(annotation) or str(getattr(annotation, "__name__", annotation))
    signs = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    for meta in field.metadata:  # annotated_types.Gt(gt=0), Ge(ge=1), ...
        attr = type(meta).__name__.lower()
        if attr in signs:
            text += f", {signs[attr]} {getattr(meta, attr):g}"
    return text + (", secret" if is_secret(field) else "")


def shown_default(field: FieldInfo) -> str:
    """The default as it would be written in the environment (``unset`` for None)."""
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "":
        return '""'
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown() -> str:
    """docs/configuration.md: every setting by group with its environment variable(s), type,
    default and description (from the declarations only: the environment plays no part)."""
    lines = [
        "# Configuration",
        "",
        "<!-- Generated by `monitor config --markdown` from the declarations of `Settings` "
        "(monitor/config.py, monitor/core/*_settings.py). Do not edit: run `make config-docs`. "
        "tests/cli/test_config.py fails when this file is stale. -->",
        "",
        "Every setting is an environment variable `MONITOR_<NAME>` (case-insensitive; the "
        "database URL also as `DATABASE_URL`). Every `monitor` command also reads a `.env` file "
        "in the current directory (another file: `MONITOR_ENV_FILE=path`; none: "
        "`MONITOR_ENV_FILE=`), under the environment: a variable set in both is taken from the "
        "environment. Under docker compose every `MONITOR_*` variable of `.env` or the shell "
        "reaches the worker by name. `monitor config` prints the effective value of each "
        "setting and where it came from, secrets masked. All are optional; durations are in "
        "the unit their name ends with (`_s`, `_ms`, `_seconds`, `_hours`, `_days`).",
        "",
    ]
    for group, names in grouped():
        lines += [f"## {group.title}", "", group.intro, ""]
        lines += ["| variable | type | default | description |", "| --- | --- | --- | --- |"]
        for name in names:
            field = Settings.model_fields[name]
            variables = ", ".join(f"`{v}`" for v in env_names(name, field))
            default = "unset" if field.default is None else f"`{_cell(shown_default(field))}`"
            lines.append(
                f"| {variables} | {_cell(type_name(field))} | {default} "
                f"| {_cell(field.description or '')} |"
            )
        lines.append("")
    return "\n".join(lines)


def masked(value: Any, secret: bool) -> str:
    """``value`` as ``monitor config`` shows it: a set secret as :data:`MASK`, and the
    password of any URL masked too."""
    if value is None:
        return "unset"
    if secret:
        return MASK if value != "" else '""'
    if isinstance(value, bool):
        return str(value).lower()
    return URL_PASSWORD.sub(rf"\g<head>{MASK}@", str(value))


def effective() -> list[dict[str, str | None]]:
    """This environment's settings as the commands use them: group, variable, shown value and
    source (default, environment, the dotenv file, or a running ``monitor up`` whose broker and
    database fill the unset ones, as for every command run beside it), in the reference's
    order."""
    read = load_settings()
    settings = endpoints.resolve(read)
    path = env_file()
    sources = setting_sources(path)
    rows: list[dict[str, str | None]] = []
    for group, names in grouped():
        for name in names:
            field = Settings.model_fields[name]
            source, variable = sources[name]
            shown = str(path) if source == "env file" else source
            if getattr(settings, name) != getattr(read, name):
                shown = f"monitor up ({endpoints.path_for(read)})"
            rows.append(
                {
                    "group": group.title,
                    "variable": variable or env_names(name, field)[0],
                    "value": masked(getattr(settings, name), is_secret(field)),
                    "source": shown,
                }
            )
    return rows


def _table(rows: list[dict[str, str | None]]) -> Table:
    table = Table(title="effective settings (secrets masked)", title_justify="left")
    for column in ("group", "variable", "value", "source"):
        table.add_column(column, overflow="fold")
    previous = None
    for row in rows:
        style = "dim" if row["source"] == "default" else None
        group = row["group"] if row["group"] != previous else ""
        previous = row["group"]
        table.add_row(
            escape(group or ""),
            escape(row["variable"] or ""),
            escape(row["value"] or ""),
            escape(row["source"] or ""),
            style=style,
        )
    return table


def register(app: typer.Typer) -> None:
    @app.command("config")
    def config(
        markdown: bool = typer.Option(
            False, "--markdown", help="Print the settings reference (docs/configuration.md)."
        ),
        output: Path | None = typer.Option(
            None, "--output", "-o", help="With --markdown: write to this file instead."
        ),
        as_json: bool = typer.Option(False, "--json", help="The effective settings as JSON."),
    ) -> None:
        """The effective settings of this environment (secrets masked) and where each value
        came from: default, environment, .env, or the running monitor up whose broker and
        database the commands use. With --markdown, the settings reference."""
        if output is not None and not markdown:
            raise typer.BadParameter("--output goes with --markdown", param_hint="--output")
        if markdown:
            unclaimed = [n for g, names in grouped() if g is OTHER for n in names]
            if unclaimed:
                typer.echo(
                    f"no group in monitor/cli/config.py claims: {', '.join(unclaimed)} "
                    f'(listed under "{OTHER.title}")',
                    err=True,
                )
            text = render_markdown()
            if output is None:
                typer.echo(text, nl=False)
            else:
                output.write_text(text, encoding="utf-8")
                typer.echo(f"wrote {output}")
            return
        rows = effective()
        if as_json:
            ac.print_json(rows)
            return
        ac.print_table(ac.console(), _table(rows))
