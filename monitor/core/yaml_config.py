"""Validated configuration from YAML with errors that name the file, the line and the field.

Pure (PyYAML and pydantic only). :func:`load_yaml_model` parses a YAML document, maps every
mapping key and sequence item to the 1-based line where it starts (PyYAML's composed node
tree), validates the data with a pydantic model, and turns validation errors into one
``<source>:<line>: <dotted.field>: <what is wrong>`` line each (at most 10; a missing field
points at its parent's line). Duplicate keys are rejected with both lines. Models can raise
:class:`FieldProblem` from a validator to point at a field below them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from monitor.core.errors import ConfigError, FieldProblem

Path = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)

_MAX_REPORTED = 10


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


def load_yaml_model(text: str, source: str, model: type[M], top_level: str) -> M:
    """Parse ``text`` (the file's content, read by the caller) and validate it as ``model``.

    ``source`` names the file in messages; ``top_level`` describes the expected top level for
    the error when it is not a mapping (e.g. "a mapping with a 'rules' list"). An empty
    document validates as ``{}``.

    Raises:
        ConfigError: the YAML is malformed, a mapping repeats a key, the top level is not a
            mapping, or validation fails (one ``<source>:<line>: <field>: <problem>`` line per
            problem, at most 10).
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
            f"{source}:{lines.get((), 1)}: the top level must be {top_level},"
            f" got {type(data).__name__}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("\n".join(_errors(exc, lines, source))) from None
