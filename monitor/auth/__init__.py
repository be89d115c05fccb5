"""Credentials: scoped API keys (issued, listed, revoked; stored hashed), the authorizer the
HTTP endpoints ask, and the origin key that tags the gate's decision events."""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "admission",
    "authorizer",
    "cache",
    "keys",
    "origin_key",
    "repo",
)
