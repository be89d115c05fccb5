"""``monitor``: the command line. Commands live in ``monitor/cli/*`` and register here.

Start-up is kept short: a command's module (and what it imports: SQLAlchemy, numpy, scipy,
scikit-learn, matplotlib, faust, aiokafka ...) is imported only when that command runs or its
own ``--help`` is asked for. ``monitor --help`` lists the commands from :data:`COMMANDS`
(a test checks that these one-line helps equal the commands' own).
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup, TyperOption

# name -> (module under monitor.cli that registers it, its one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("up", "Run the whole pipeline locally and show it working: the make demo command."),
    "schema": (
        "schema",
        "Print the JSON Schema of the agent-event/v1 contract (generated from the models).",
    ),
    "worker": (
        "worker",
        "Run the stream worker: Kafka ingest into Postgres, judges, drift "
        "checks, alert evaluation and delivery, HTTP ingest, /v1/calibration, /metrics, "
        "/health.",
    ),
    "migrate": (
        "worker",
        "Create or upgrade the database schema (Alembic); creates the database if missing.",
    ),
    "replay": (
        "replay",
        "Replay a recorded file: validate every event and send it to the events topic.",
    ),
    "simulate": (
        "simulate",
        "Generate synthetic agent traffic with known calibration, drift and escalation.",
    ),
    "calibration": (
        "calibration",
        "Calibration of the agents' confidence: report, recalibration maps.",
    ),
    "escalation": (
        "escalation",
        "Does escalation follow confidence? Rate per confidence bin, "
        "inversion test, time to escalation, missed escalations.",
    ),
    "thresholds": (
        "escalation",
        "Threshold advisor: for thresholds on a conversation's "
        "minimum confidence, the escalation rate and the failures caught.",
    ),
    "passk": ("escalation", "pass^k per agent for tasks run in several trials."),
    "drift": (
        "drift",
        "Drift per segment: recent window against a baseline, every statistic "
        "and p-value, stored in drift_checks.",
    ),
    "drift-accept": (
        "drift_accept",
        "Accept a deliberate change: re-pin the drift reference "
        "of the selected segments to the stretch since the change, so their drift "
        "alerts resolve at the next quiet check.",
    ),
    "judges": (
        "judges",
        "Judge volumes, errors, latency, failure categories, and agreement "
        "with ground truth (accuracy, Cohen's kappa).",
    ),
    "gate": (
        "gate",
        "Gate effectiveness per agent x domain: decisions by kind, failures "
        "among proceeded vs all, failures prevented, escalation rate.",
    ),
    "conversation": (
        "conversation",
        "One conversation, redacted: its events in order, its verdicts with their evidence, "
        "its gate decisions and its sampling decision.",
    ),
    "alerts": ("alerts", "Alerts: list, silence, unsilence, ack, rules, test."),
    "dashboards": ("dashboards", "Grafana dashboards: upload them to a running Grafana."),
    "keys": ("keys", "API keys: issue, list, revoke (scoped to agents and actions)."),
    "config": (
        "config",
        "The effective settings of this environment (secrets masked) and where each value "
        "came from: default, environment, .env, or the running monitor up whose broker and "
        "database the commands use. With --markdown, the settings reference.",
    ),
    "report": (
        "report",
        "A self-contained HTML report (PNG charts too): health per agent, "
        "firing alerts, charts, full tables.",
    ),
}


class _Placeholder(TyperCommand):
    """Stands for a command whose module is not imported yet (name and one-line help only)."""


def _plain_help(command: Any) -> None:
    """Help for a terminal: no raw backticks (docstrings quote code with them) in the command's
    help and its options', recursively through groups."""
    for attr in ("help", "short_help"):
        if getattr(command, attr, None):
            setattr(command, attr, getattr(command, attr).replace("`", ""))
    for param in getattr(command, "params", []):
        if getattr(param, "help", None):
            param.help = param.help.replace("`", "")
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """No ``<bool>`` placeholder after a flag in help (it takes no value)."""
    return None if self.is_flag else _typed_option(self, ctx)


_typed_option = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


def load_module_commands(module: str) -> dict[str, Any]:
    """Import ``monitor.cli.<module>`` and return the click commands it registers."""
    scratch = typer.Typer(add_completion=False)
    scratch.callback()(lambda: None)  # a group even when the module registers one command
    importlib.import_module(f"monitor.cli.{module}").register(scratch)
    group = typer.main.get_command(scratch)
    assert isinstance(group, TyperGroup)
    _plain_help(group)
    return dict(group.commands)


class LazyGroup(TyperGroup):
    """The ``monitor`` group: every command of :data:`COMMANDS` is listed at once and loaded
    (its module imported) when it is resolved to run or to print its own help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, (_, short) in COMMANDS.items():
            self.commands.setdefault(name, _Placeholder(name, help=short, short_help=short))

    def load(self, name: str) -> Any:
        """The real command ``name`` (importing its module on first use), else None."""
        command = self.commands.get(name)
        if isinstance(command, _Placeholder):
            module = COMMANDS[name][0]
            for other, real in load_module_commands(module).items():
                if COMMANDS.get(other, ("",))[0] == module:
                    self.commands[other] = real
            command = self.commands.get(name)
        return command

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] in COMMANDS:
            self.load(args[0])
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="monitor",
    cls=LazyGroup,
    help="Agent reliability monitor: ingest agent events, score them, watch calibration and "
    "escalation, and page on-call when they go wrong.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def main() -> None:
    """Agent reliability monitor. Configure with MONITOR_* environment variables or .env
    (docs/configuration.md; `monitor config` shows the effective settings)."""


if __name__ == "__main__":  # pragma: no cover
    app()
