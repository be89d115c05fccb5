"""One exception tree: every exception class monitor/ defines for its callers lives in
monitor/core/errors.py, derives from MonitorError and has a line in the module docstring's tree.

Pure: reads the source (ast) and imports monitor.core.errors only.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
from pathlib import Path

from monitor.core import errors
from monitor.core.errors import MonitorError

PKG = Path(__file__).resolve().parent.parent.parent / "monitor"
ERRORS = PKG / "core" / "errors.py"
BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)


def _base_names(node: ast.ClassDef) -> set[str]:
    names = set()
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.add(base.id)
        elif isinstance(base, ast.Attribute):
            names.add(base.attr)
    return names


def exception_classes() -> dict[str, list[str]]:
    """Every class in monitor/ that derives (by name, transitively) from an exception:
    name -> the files defining a class of that name."""
    classes: list[tuple[str, set[str], str]] = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                rel = str(path.relative_to(PKG.parent))
                classes.append((node.name, _base_names(node), rel))
    known = set(BUILTIN_EXCEPTIONS)
    while True:
        grown = {name for name, bases, _ in classes if bases & known} - known
        if not grown:
            break
        known |= grown
    found: dict[str, list[str]] = {}
    for name, bases, rel in classes:
        if bases & known:
            found.setdefault(name, []).append(rel)
    return found


def test_every_public_exception_is_defined_in_core_errors() -> None:
    outside = {
        name: files
        for name, files in exception_classes().items()
        if not name.startswith("_") and files != ["monitor/core/errors.py"]
    }
    assert outside == {}


def test_one_class_per_exception_name() -> None:
    doubles = {name: files for name, files in exception_classes().items() if len(files) > 1}
    assert doubles == {}


def test_the_tree_derives_from_monitor_error_and_draws_every_class() -> None:
    defined = {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls)
        and issubclass(cls, BaseException)
        and cls.__module__ == errors.__name__
    }
    assert len(defined) >= 30
    assert all(issubclass(cls, MonitorError) for cls in defined.values())
    doc = errors.__doc__ or ""
    drawn = set(re.findall(r"^\s*(?:[│ ]*[├└]── )?([A-Z]\w+)(?: \(\w+\))?\s{2,}\S", doc, re.M))
    assert drawn == set(defined)


def test_builtin_bases_callers_rely_on_are_kept() -> None:
    for name in ("MalformedOutput", "FieldProblem", "KeyDefinitionError"):
        assert issubclass(getattr(errors, name), ValueError), name
    assert issubclass(errors.BufferInUse, errors.ConfigError)
    assert issubclass(errors.WorkerFailed, errors.InfraError)
    assert issubclass(errors.GrafanaAuthError, errors.GrafanaPushError)
    for name in (
        "EmitterNotRunning",
        "DeliveryError",
        "BufferFull",
        "GateError",
        "GateUnavailable",
    ):
        assert issubclass(getattr(errors, name), errors.EmitterError), name
