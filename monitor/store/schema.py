"""The complete table metadata (core and analytics tables): what migrations must match."""

from __future__ import annotations

from monitor.store import tables_analytics as tables_analytics  # registers its tables
from monitor.store.tables import metadata as metadata

__all__ = ["metadata"]
