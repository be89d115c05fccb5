"""The runtime trust gate (``POST /v1/gate``, docs/gate.md): policy, request parsing, the
decision (pure) and the state the worker holds in memory (maps, policy, checks; ``state``)."""
