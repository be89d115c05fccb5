"""The runtime trust gate (``POST /v1/gate``, docs/gate.md): policy, request parsing, the
decision (pure) and the state the gate process holds in memory (maps, policy, checks; ``state``)."""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "answering",
    "buffer_slot",
    "checks",
    "decision_outbox",
    "effect",
    "effect_repo",
    "endpoint",
    "http_server",
    "policy",
    "producer",
    "request",
    "server",
    "state",
)
