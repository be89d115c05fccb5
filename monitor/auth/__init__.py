"""Credentials: scoped API keys (issued, listed, revoked; stored hashed), the authorizer the
HTTP endpoints ask, and the origin key that tags the gate's decision events."""
