"""The agent-event/v1 contract: models, decoding with reasons, the JSON Schema. Pure."""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "events",
    "limits",
    "origin",
)
