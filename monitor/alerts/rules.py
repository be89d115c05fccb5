"""Alert rules: load a YAML rules file into a validated, immutable :class:`RuleSet`.

Pure apart from :func:`default_rules`, which reads the packaged ``default_rules.yaml``.
Errors name the file, the 1-based line and the dotted field, one problem per line, e.g.::

    alerts.yaml:14: rules[2].threshold: Input should be a valid number (got 'high')

Line numbers come from PyYAML's composed node tree: every mapping key and sequence item is
mapped to the line where it starts; a missing field points at its parent (the rule's line).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from monitor.alerts.durations import Duration, format_duration, parse_duration
from monitor.alerts.rule_models import (
    CALIBRATION_METRICS,
    DEFAULT_MIN_SAMPLES,
    VALUE_RANGE,
    Annotations,
    Comparison,
    DriftTest,
    Evidence,
    FlapPolicy,
    Metric,
    Rule,
    RuleSet,
    Scope,
    Severity,
)
from monitor.config import Settings
from monitor.core.errors import ConfigError
from monitor.core.yaml_config import load_yaml_model

__all__ = [
    "CALIBRATION_METRICS",
    "DEFAULT_MIN_SAMPLES",
    "VALUE_RANGE",
    "Annotations",
    "Comparison",
    "DriftTest",
    "Duration",
    "Evidence",
    "FlapPolicy",
    "Metric",
    "Rule",
    "RuleSet",
    "Scope",
    "Severity",
    "default_rules",
    "format_duration",
    "load_rules",
    "parse_duration",
]

DEFAULT_RULES_FILE = "default_rules.yaml"


def load_rules(text: str, source: str) -> RuleSet:
    """Parse and validate a rules file's text (already read by the caller).

    ``source`` names the file in messages (e.g. ``alerts.yaml``). An empty document is a rule
    set with defaults and no rules.

    Raises:
        ConfigError: the YAML is malformed, a mapping repeats a key, the top level is not a
            mapping, or validation fails. The message has one line per problem (at most 10),
            each ``<source>:<line>: <dotted.field>: <what is wrong>``; duplicate rule names
            name both lines (:mod:`monitor.core.yaml_config`).
    """
    return load_yaml_model(text, source, RuleSet, "a mapping with a 'rules' list")


def default_rules() -> RuleSet:
    """The rule set shipped with the package (``monitor/alerts/default_rules.yaml``).

    Raises ConfigError if the packaged file is invalid (a packaging bug; tests guard it).
    """
    text = resources.files("monitor.alerts").joinpath(DEFAULT_RULES_FILE).read_text("utf-8")
    return load_rules(text, DEFAULT_RULES_FILE)


def rules_to_dict(rule_set: RuleSet) -> dict[str, Any]:
    """The rule set as JSON-ready data that :func:`load_rules` accepts back (``for`` aliased)."""
    return rule_set.model_dump(mode="json", by_alias=True, exclude_none=True)


def load_alert_rules(settings: Settings, path: Path | None = None) -> tuple[RuleSet, str]:
    """The alert rule set and where it came from: ``path``, else ``settings.alert_rules_file``,
    else the packaged defaults. Raises ConfigError (naming file:line:field) when invalid."""
    path = path if path is not None else settings.alert_rules_file
    if path is None:
        return default_rules(), "built-in default rules"
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the rules file: {exc.strerror}") from None
    return load_rules(text, str(path)), str(path)
