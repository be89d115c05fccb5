"""Process telemetry: the Prometheus metrics every service of the worker reports, and the
event-loop probe behind the loop-stall gauge."""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "loop_lag",
    "ops_metrics",
)
