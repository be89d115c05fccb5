"""`python -m monitor.cli`."""

from monitor.cli.main import app

app()
