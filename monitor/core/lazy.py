"""Deferred imports of heavy libraries (scipy, scikit-learn): the module is imported at the
first attribute access, so importing a metrics module (and the CLI that lists it) stays fast.

Pure: no I/O beyond the import itself.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for module ``name``; ``lazy.attr`` imports it once, then reads ``attr``."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


def lazy_module(name: str) -> Any:
    """A :class:`LazyModule` for ``name`` (typed ``Any``, like an untyped library)."""
    return LazyModule(name)
