"""The shared kernel every package may import: injectable time, the exception tree, the line-
numbered YAML loader. Imports nothing else from monitor.
"""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "clock",
    "errors",
    "fields",
    "gate_settings",
    "gc_tuning",
    "http_body",
    "http_guard",
    "http_refusals",
    "http_reply",
    "http_settings",
    "inflate",
    "lazy",
    "log_redaction",
    "rate_limit",
    "redact",
    "resilience",
    "retention_settings",
    "throttled_log",
    "yaml_config",
)
