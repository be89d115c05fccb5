"""The stream worker: app.py (the only faust import), its services and /metrics."""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = ("app",)
