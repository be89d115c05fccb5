"""Alembic migration modules loaded from their files, for tests that check what they write."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

VERSIONS = Path(__file__).resolve().parents[1] / "migrations" / "versions"


def load_migration(name: str) -> ModuleType:
    """The module ``migrations/versions/<name>.py`` (e.g. ``"0013_read_rollups"``)."""
    spec = importlib.util.spec_from_file_location(f"migration_{name}", VERSIONS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
