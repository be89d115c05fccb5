"""Alert rules: load a YAML rules file into a validated, immutable :class:`RuleSet`.

Pure apart from :func:`default_rules`, which reads the packaged ``default_rules.yaml``.
Errors name the file, the 1-based line and the dotted field, one problem per line, e.g.::

    alerts.yaml:14: rules[2].threshold: Input should be a valid number (got 'high')

Line numbers come from PyYAML's composed node tree: every mapping key and sequence item is
mapped to the line where it starts; a missing field points at its parent (the rule's line).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from monitor.alerts.durations import Duration, format_duration, parse_duration
from monitor.alerts.rule_models import (
    CALIBRATION_METRICS,
    DEFAULT_MIN_SAMPLES,
    VALUE_RANGE,
    Annotations,
    Comparison,
    DriftTest,
    FieldProblem,
    Metric,
    Path,
    Rule,
    RuleSet,
    Scope,
    Severity,
)
from monitor.errors import ConfigError

__all__ = [
    "CALIBRATION_METRICS",
    "DEFAULT_MIN_SAMPLES",
    "VALUE_RANGE",
    "Annotations",
    "Comparison",
    "DriftTest",
    "Duration",
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

_MAX_REPORTED = 10
DEFAULT_RULES_FILE = "default_rules.yaml"


def dotted(path: Sequence[str | int]) -> str:
    """``("rules", 2, "threshold")`` -> ``rules[2].threshold``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _walk(node: yaml.Node, path: Path, lines: dict[Path, int], source: str) -> None:
    """Record the 1-based start line of every key/item below ``node``; reject duplicate keys."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            child = (*path, str(key_node.value))
            line = key_node.start_mark.line + 1
            if child in lines:
                raise ConfigError(
                    f"{source}:{line}: {dotted(child)}: duplicate key "
                    f"(first given at line {lines[child]})"
                )
            lines[child] = line
            _walk(value_node, child, lines, source)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _walk(item, (*path, i), lines, source)


def _line_of(path: Path, lines: Mapping[Path, int]) -> int | None:
    """The line of ``path`` or of its nearest ancestor present in the file."""
    for n in range(len(path), 0, -1):
        found = lines.get(tuple(path[:n]))
        if found is not None:
            return found
    return lines.get(())


def _describe(err: ErrorDetails, lines: Mapping[Path, int], source: str) -> str:
    """One ``file:line: field: message`` line for a pydantic error."""
    loc: Path = tuple(err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    problem = err.get("ctx", {}).get("error")
    got = ""
    if isinstance(problem, FieldProblem):
        msg = problem.message
        if problem.also is not None:
            also = (*loc, *problem.also)
            also_line = _line_of(also, lines)
            at = f", line {also_line}" if also_line is not None else ""
            msg += f" (first defined at {dotted(also)}{at})"
        loc = (*loc, *problem.path)
    else:
        value = err.get("input")
        quiet = err["type"] in ("extra_forbidden", "missing") or repr(value) in msg
        if isinstance(value, str | int | float) and not quiet:
            got = f" (got {value!r})"
    line = _line_of(loc, lines)
    where = f"{source}:{line}" if line is not None else source
    field = f" {dotted(loc)}:" if loc else ""
    return f"{where}:{field} {msg}{got}"


def _errors(exc: ValidationError, lines: Mapping[Path, int], source: str) -> Iterator[str]:
    errs = exc.errors()
    for err in errs[:_MAX_REPORTED]:
        yield _describe(err, lines, source)
    if len(errs) > _MAX_REPORTED:
        yield f"{source}: ... and {len(errs) - _MAX_REPORTED} more problems"


def load_rules(text: str, source: str) -> RuleSet:
    """Parse and validate a rules file's text (already read by the caller).

    ``source`` names the file in messages (e.g. ``alerts.yaml``). An empty document is a rule
    set with defaults and no rules.

    Raises:
        ConfigError: the YAML is malformed, a mapping repeats a key, the top level is not a
            mapping, or validation fails. The message has one line per problem (at most 10),
            each ``<source>:<line>: <dotted.field>: <what is wrong>``; duplicate rule names
            name both lines.
    """
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise ConfigError(f"{where}: not valid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    lines: dict[Path, int] = {}
    if node is not None:
        lines[()] = node.start_mark.line + 1
        _walk(node, (), lines, source)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{source}:{lines.get((), 1)}: the top level must be a mapping with a 'rules' list,"
            f" got {type(data).__name__}"
        )
    try:
        return RuleSet.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("\n".join(_errors(exc, lines, source))) from None


def default_rules() -> RuleSet:
    """The rule set shipped with the package (``monitor/alerts/default_rules.yaml``).

    Raises ConfigError if the packaged file is invalid (a packaging bug; tests guard it).
    """
    text = resources.files("monitor.alerts").joinpath(DEFAULT_RULES_FILE).read_text("utf-8")
    return load_rules(text, DEFAULT_RULES_FILE)


def rules_to_dict(rule_set: RuleSet) -> dict[str, Any]:
    """The rule set as JSON-ready data that :func:`load_rules` accepts back (``for`` aliased)."""
    return rule_set.model_dump(mode="json", by_alias=True, exclude_none=True)
