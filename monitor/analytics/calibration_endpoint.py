"""``GET /v1/calibration/{agent_id}`` as a framework-neutral async function (the worker wires
it; the maps are read through the injected ``load_maps``).

Answers (JSON): 200 ``{"agent_id", "maps": [...]}``; 401 ``unauthorized`` (``token`` set and
the bearer token missing or wrong; 429 per peer address after too many failures); 429
``rate_limited`` with ``Retry-After`` (the credential's rate, or the peer's when the read API
is open); 404 ``unknown_agent`` (no map); 503 ``unavailable`` (``load_maps`` raised
:class:`StoreUnavailable`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from monitor.core.http_guard import UNAUTHORIZED, Guard, credential_key
from monitor.core.http_reply import Reply, error_reply, json_reply
from monitor.ingest.http import token_ok


class StoreUnavailable(Exception):
    """The maps could not be read (-> 503)."""


class HasDict(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


async def answer_calibration(
    agent_id: str,
    *,
    headers: Mapping[str, str],
    peer: str | None,
    token: str | None,
    guard: Guard,
    load_maps: Callable[[str], Awaitable[Sequence[HasDict]]],
) -> Reply:
    """The answer to one read (see the module docstring); never raises."""
    authorization = headers.get("Authorization")
    if token and not token_ok(authorization, token):
        refusal = guard.stranger(peer) or UNAUTHORIZED
        return error_reply(refusal.status, refusal.message, refusal.reason, refusal.headers)
    limited = guard.credential(credential_key(authorization) if token else f"peer:{peer}")
    if limited is not None:
        return error_reply(limited.status, limited.message, limited.reason, limited.headers)
    try:
        maps = await load_maps(agent_id)
    except StoreUnavailable as exc:
        return error_reply(503, f"store unavailable ({exc})", "unavailable")
    if not maps:
        message = f"no recalibration map for agent {agent_id!r}"
        return json_reply(404, {"error": message, "reason": "unknown_agent", "agent_id": agent_id})
    return json_reply(200, {"agent_id": agent_id, "maps": [m.to_dict() for m in maps]})
