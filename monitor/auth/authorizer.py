"""The authorizer every HTTP endpoint asks (pure: plain values in, a verdict out).

``check(authorization, action, agent_ids)`` answers :class:`Grant` or :class:`Denied`:

- ``Bearer <secret>`` of an active API key (:mod:`monitor.auth.keys`) whose scopes include
  ``action`` grants that action for the key's agents; ``agent_ids`` outside them are denied
  (403 ``out_of_scope``). Endpoints that learn the agents from the body (ingest, traces, gate)
  check with none and refuse per event or request with :meth:`Grant.allows`;
- the shared token of the action (``MONITOR_INGEST_TOKEN`` for write, ``MONITOR_GATE_TOKEN``
  for gate, ``MONITOR_API_TOKEN`` for read) grants it for every agent: the development mode;
- anything else: 401 ``unauthorized`` (missing, malformed, unknown, revoked or expired: the
  answer does not say which, the log line names the key id when there is one); a known key
  without the scope: 403 ``missing_scope``.

The secret is compared by its SHA-256 (a dict lookup), the shared tokens in constant time.
Nothing here logs or returns a secret.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from monitor.auth.keys import SECRET_PREFIX, ApiKey, Scope, agent_matches, hash_secret


@dataclass(frozen=True)
class Grant:
    """Who asked (``key_id``: an API key's id, ``shared-token``, or the gate's ``loopback``
    caller) and for which agents (``agents`` None: every agent)."""

    key_id: str
    agents: tuple[str, ...] | None

    def allows(self, agent_id: str) -> bool:
        return self.agents is None or agent_matches(self.agents, agent_id)


@dataclass(frozen=True)
class Denied:
    """Why not: ``status`` 401 or 403, a machine-readable ``reason`` and a message."""

    status: int
    reason: str
    message: str
    key_id: str | None = None  # the key that asked, when one was recognised


SHARED = "shared-token"


def bearer(header: str | None) -> str | None:
    """The token of ``Bearer <token>`` (the scheme in any case, RFC 7235), else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def out_of_scope(grant: Grant, agent_id: str) -> str:
    """The message of an agent outside ``grant``."""
    return f"agent {agent_id[:140]!r} is outside the scope of key {grant.key_id}"


class Authorizer:
    """Checks credentials against ``keys`` (by secret hash) and the shared ``tokens``."""

    def __init__(
        self,
        keys: Mapping[str, ApiKey],
        tokens: Mapping[Scope, str | None],
        now: Callable[[], datetime],
    ) -> None:
        self.keys = keys
        self.tokens = tokens
        self.now = now

    def known(self, authorization: str | None) -> bool:
        """Whether the bearer token is a shared token or the secret of a loaded key (active
        or not): a miss may be a key issued since the keys were loaded."""
        token = bearer(authorization)
        if token is None:
            return False
        if token.startswith(SECRET_PREFIX):
            return hash_secret(token) in self.keys
        return any(
            t and hmac.compare_digest(token.encode(), t.encode()) for t in self.tokens.values()
        )

    def check(
        self, authorization: str | None, action: Scope, agent_ids: Iterable[str] = ()
    ) -> Grant | Denied:
        """See the module docstring."""
        token = bearer(authorization)
        if token is None:
            return Denied(401, "unauthorized", "missing or wrong bearer token")
        grant: Grant | None = None
        if token.startswith(SECRET_PREFIX):
            key = self.keys.get(hash_secret(token))
            if key is None or not key.active(self.now()):
                kid = key.id if key is not None else None
                return Denied(401, "unauthorized", "missing or wrong bearer token", kid)
            if action not in key.scopes:
                return Denied(
                    403,
                    "missing_scope",
                    f"key {key.id} lacks the {action!r} scope (it has {', '.join(key.scopes)})",
                    key.id,
                )
            grant = Grant(key.id, key.agents)
        else:
            shared = self.tokens.get(action)
            if shared and hmac.compare_digest(token.encode(errors="replace"), shared.encode()):
                grant = Grant(SHARED, None)
        if grant is None:
            return Denied(401, "unauthorized", "missing or wrong bearer token")
        for agent_id in agent_ids:
            if not grant.allows(agent_id):
                return Denied(403, "out_of_scope", out_of_scope(grant, agent_id), grant.key_id)
        return grant
