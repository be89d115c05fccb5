"""Scoped API keys: the secret's format and hash, and what a key may do (pure).

A key's secret is ``mk_`` followed by 43 URL-safe base64 characters: 32 random bytes from
:mod:`secrets`. The store keeps only its SHA-256 (:func:`hash_secret`): a fast hash is enough
because the secret is a random 256-bit value, not a password; there is nothing to guess
faster than by brute force over 2**256, so a slow KDF (scrypt, PBKDF2) would only slow every
lookup. The hash is also the lookup key, so authenticating a request is one dict access.

A key names its agents as exact ids, ``prefix*`` patterns (a team whose ids share a prefix) or
``*`` (every agent), and its scopes among :data:`SCOPES`: ``write`` (``POST /v1/events``,
``POST /v1/traces``), ``gate`` (``POST /v1/gate``) and ``read`` (``GET /v1/calibration``).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from monitor.core.errors import KeyDefinitionError

Scope = Literal["write", "gate", "read"]
SCOPES: tuple[Scope, ...] = ("write", "gate", "read")
SECRET_PREFIX = "mk_"
MAX_PATTERN_CHARS = 128


def new_secret() -> str:
    """A fresh key secret (shown once, never stored)."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def new_key_id() -> str:
    """A fresh public key id (what ``monitor keys list`` and the logs show)."""
    return "key_" + secrets.token_hex(6)


def hash_secret(secret: str) -> str:
    """The stored form of ``secret``: its SHA-256, hex (see the module docstring)."""
    return hashlib.sha256(secret.encode("utf-8", errors="replace")).hexdigest()


def parse_scopes(values: Iterable[str]) -> tuple[Scope, ...]:
    """Scopes from ``values`` (each may be comma-separated), deduplicated, in SCOPES order."""
    wanted = {part.strip() for v in values for part in v.split(",") if part.strip()}
    unknown = sorted(wanted - set(SCOPES))
    if unknown:
        got = ", ".join(unknown)
        raise KeyDefinitionError(f"scopes must be among {', '.join(SCOPES)} (got {got})")
    if not wanted:
        raise KeyDefinitionError("at least one scope is needed")
    return tuple(s for s in SCOPES if s in wanted)


def check_agents(patterns: Iterable[str]) -> tuple[str, ...]:
    """``patterns`` validated: non-empty, at most 128 chars, ``*`` only as the last char."""
    out = tuple(dict.fromkeys(p.strip() for p in patterns if p.strip()))
    if not out:
        raise KeyDefinitionError("at least one agent is needed: an id, 'prefix*' or '*'")
    for p in out:
        if len(p) > MAX_PATTERN_CHARS or "*" in p[:-1]:
            raise KeyDefinitionError(
                f"agent pattern {p[:40]!r}: an id or a prefix followed by one '*', "
                f"at most {MAX_PATTERN_CHARS} characters"
            )
    return out


def agent_matches(patterns: Iterable[str], agent_id: str) -> bool:
    """True when ``agent_id`` is one of ``patterns`` or starts with a ``prefix*`` one."""
    for p in patterns:
        if p.endswith("*"):
            if agent_id.startswith(p[:-1]):
                return True
        elif agent_id == p:
            return True
    return False


@dataclass(frozen=True)
class ApiKey:
    """One stored key (its secret's hash, never the secret)."""

    id: str
    name: str
    key_hash: str
    agents: tuple[str, ...]
    scopes: tuple[Scope, ...]
    created_at: datetime | None = None
    expires_at: datetime | None = None
    revoked_at: datetime | None = None

    def active(self, now: datetime) -> bool:
        """Not revoked and not expired at ``now``."""
        expired = self.expires_at is not None and self.expires_at <= now
        return self.revoked_at is None and not expired

    @staticmethod
    def scopes_of(values: Iterable[str]) -> tuple[Scope, ...]:
        """Stored scope strings as scopes (unknown ones ignored)."""
        stored = set(values)
        return tuple(s for s in SCOPES if s in stored)
