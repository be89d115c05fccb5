"""Reading Kafka safely: a consumer's fetch guarded against record batches it cannot decode,
and the raw scan that finds such a batch. Used by every consumer of the project (the ingest
loop, the OTLP traces topic, the judge requests)."""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "batch_scan",
    "guarded_fetch",
)
