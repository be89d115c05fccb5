"""The complete table metadata (core, analytics, judging, alerting, keys): what migrations match."""

from __future__ import annotations

from monitor.store import tables_alerts as tables_alerts  # registers its tables
from monitor.store import tables_analytics as tables_analytics  # registers its tables
from monitor.store import tables_auth as tables_auth  # registers its tables
from monitor.store import tables_judges as tables_judges  # registers its tables
from monitor.store import tables_otel as tables_otel  # registers its tables
from monitor.store import tables_rollups as tables_rollups  # registers its tables
from monitor.store.tables import metadata as metadata

__all__ = ["metadata"]
