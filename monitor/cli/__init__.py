"""The command line: `main.py` builds the root app, one module per command group."""

from monitor.cli.main import app

__all__ = ["app"]
