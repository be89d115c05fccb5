"""Deterministic simulated agents whose reliability is known by construction. Pure."""
