"""The stream worker: app.py (the only faust import), its services and /metrics."""
