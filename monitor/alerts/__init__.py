"""alerts package."""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "alert_view",
    "backtest",
    "destinations",
    "durations",
    "evaluate",
    "exemplar_repo",
    "exemplars",
    "incidents",
    "lifecycle",
    "notifier",
    "redact",
    "repo",
    "rules",
    "signing",
    "silences",
    "sink_check",
    "sinks.base",
    "sinks.registry",
    "sinks.webhook",
    "states",
    "timeline",
)
