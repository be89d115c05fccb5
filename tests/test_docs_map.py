"""The module map in docs/architecture.md names exactly the modules and packages under monitor/.

The map is the first fenced block after the heading ``## The map``. Its format: the first line
is ``monitor/``; every other line is either an entry (indented two spaces per level, a package
written ``name/``, a module ``name.py``, then optionally at least two spaces and a description)
or the continuation of a wrapped description (indented at least ``CONTINUATION_INDENT`` spaces).
``__init__.py`` files are implied by their package. Pure: reads files, no broker, no database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
ROOT = "monitor"
CONTINUATION_INDENT = 24
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.py|/))(?:  +\S.*)?$")


class MapFormatError(ValueError):
    """A line of the map that is neither an entry nor a continuation."""


@dataclass(frozen=True)
class MapDiff:
    """What the map lacks and what it names that does not exist (repository-relative paths)."""

    missing: tuple[str, ...]
    unknown: tuple[str, ...]


def map_block(markdown: str) -> str:
    """The first fenced block after ``## The map``."""
    found = re.search(r"^## The map\n.*?^```\n(?P<body>.*?)^```$", markdown, re.S | re.M)
    if found is None:
        raise MapFormatError("no fenced block after '## The map'")
    return found.group("body")


def parse_map(block: str) -> set[str]:
    """Repository-relative paths the map names: ``monitor/x/`` for packages, ``monitor/x/y.py``
    for modules."""
    lines = [line for line in block.splitlines() if line.strip()]
    if not lines or lines[0].rstrip() != f"{ROOT}/":
        raise MapFormatError(f"the map must start with '{ROOT}/'")
    stack = [f"{ROOT}/"]
    named: set[str] = {stack[0]}
    for number, line in enumerate(lines[1:], start=2):
        indent = len(line) - len(line.lstrip(" "))
        if indent >= CONTINUATION_INDENT:
            continue
        entry = ENTRY.match(line)
        if entry is None or indent % 2 or indent == 0:
            raise MapFormatError(f"map line {number} is not an entry: {line!r}")
        depth = indent // 2
        if depth > len(stack):
            raise MapFormatError(f"map line {number} is indented below no package: {line!r}")
        del stack[depth:]
        path = stack[-1] + entry.group("name")
        if path in named:
            raise MapFormatError(f"map line {number} names {path} twice")
        named.add(path)
        if path.endswith("/"):
            stack.append(path)
    return named


def source_tree(repo: Path) -> set[str]:
    """Repository-relative paths of monitor's packages (``x/``) and modules (``x/y.py``)."""
    found: set[str] = set()
    for init in (repo / ROOT).rglob("__init__.py"):
        found.add(init.parent.relative_to(repo).as_posix() + "/")
    for module in (repo / ROOT).rglob("*.py"):
        if module.name != "__init__.py" and "__pycache__" not in module.parts:
            found.add(module.relative_to(repo).as_posix())
    return found


def compare(named: set[str], existing: set[str]) -> MapDiff:
    return MapDiff(missing=tuple(sorted(existing - named)), unknown=tuple(sorted(named - existing)))


SAMPLE = """\
monitor/
  config.py                   settings
  ingest/                     the write path
    loop.py                   the consumer, whose description
                              wraps onto a second line
    writer.py
  alerts/
    sinks/                    delivery
      slack.py                Slack
    rules.py                  rules
"""


def test_the_map_names_every_module_and_package_under_monitor_and_nothing_else() -> None:
    diff = compare(parse_map(map_block(DOC.read_text())), source_tree(REPO))
    assert diff.missing == (), f"add to the map in docs/architecture.md: {diff.missing}"
    assert diff.unknown == (), f"the map in docs/architecture.md names: {diff.unknown}"


def test_parse_map_builds_paths_from_indentation_and_skips_continuations() -> None:
    assert parse_map(SAMPLE) == {
        "monitor/",
        "monitor/config.py",
        "monitor/ingest/",
        "monitor/ingest/loop.py",
        "monitor/ingest/writer.py",
        "monitor/alerts/",
        "monitor/alerts/sinks/",
        "monitor/alerts/sinks/slack.py",
        "monitor/alerts/rules.py",
    }


def test_a_module_missing_from_the_map_and_a_module_that_does_not_exist_are_both_reported(
    tmp_path: Path,
) -> None:
    for path in (
        "monitor/__init__.py",
        "monitor/config.py",
        "monitor/ingest/__init__.py",
        "monitor/ingest/loop.py",
        "monitor/ingest/rows.py",
    ):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    block = "monitor/\n  config.py\n  ingest/\n    loop.py\n    writer.py   gone\n"
    diff = compare(parse_map(block), source_tree(tmp_path))
    assert diff == MapDiff(
        missing=("monitor/ingest/rows.py",), unknown=("monitor/ingest/writer.py",)
    )


@pytest.mark.parametrize(
    "block",
    [
        "ingest/\n  loop.py\n",  # no root line
        "monitor/\n  ingest/\n      loop.py\n",  # skips a level
        "monitor/\n  ingest\n",  # neither name/ nor name.py
        "monitor/\n  loop.py\n  loop.py\n",  # named twice
        "monitor/\n   loop.py\n",  # odd indentation
    ],
)
def test_a_malformed_map_is_an_error_not_a_silent_pass(block: str) -> None:
    with pytest.raises(MapFormatError):
        parse_map(block)


def test_map_block_is_the_fenced_block_under_the_heading() -> None:
    text = "# A\n\n```\nnot this\n```\n\n## The map\n\nprose\n\n```\nmonitor/\n```\n"
    assert map_block(text) == "monitor/\n"
