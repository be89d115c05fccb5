"""Kafka and HTTP ingest: the batch loop, the event writer and its roll-up SQL, dead letters. Pure
row building beside the I/O edge.
"""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "endpoint",
    "items_sql",
    "loop",
    "writer",
)
