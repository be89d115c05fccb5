"""The command line: `main.py` builds the root app, one module per command group."""

from monitor.cli.main import app

__all__ = ["app"]

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = ()
