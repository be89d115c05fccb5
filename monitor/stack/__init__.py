"""The embedded stack of `monitor up`: Tansu broker, private Postgres, ports, processes, endpoints,
the demo traffic and its summary.
"""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "demo",
    "demo_alerts",
    "demo_gate",
    "endpoints",
    "runner",
    "summary",
)
