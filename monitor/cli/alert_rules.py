"""The alert rule set as the ``monitor alerts`` commands load it (``alerts.py`` and
``alerts_backtest.py`` both import it from here, so neither imports the other)."""

from __future__ import annotations

from pathlib import Path

import typer

from monitor.alerts.rules import RuleSet, load_alert_rules
from monitor.config import load_settings
from monitor.core.errors import ConfigError


def load_rule_set(path: Path | None = None) -> tuple[RuleSet, str]:
    """The rule set and where it came from (see :func:`monitor.alerts.rules.load_alert_rules`)."""
    return load_alert_rules(load_settings(), path)


def rules_or_exit(path: Path | None) -> RuleSet:
    """The rule set of ``path`` (else the settings' file, else the built-in rules); an invalid
    file is reported on standard error and the command exits with status 2."""
    try:
        return load_rule_set(path)[0]
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
