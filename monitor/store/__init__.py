"""store package."""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "engine",
    "partitions",
    "replica",
    "retention",
    "store_errors",
    "tables",
    "tables_alerts",
    "tables_analytics",
    "tables_auth",
    "tables_otel",
    "tables_rollups",
)
