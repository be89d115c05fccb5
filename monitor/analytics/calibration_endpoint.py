"""``GET /v1/calibration/{agent_id}`` as a framework-neutral async function (the worker wires
it; the maps are read through the injected ``load_maps``).

A credential is required: the injected ``authorize`` is bound to the ``read`` action (an API
key with the ``read`` scope, or ``MONITOR_API_TOKEN``, :mod:`monitor.auth`), and the agent
must be in the key's scope. Answers (JSON): 200 ``{"agent_id", "maps": [...]}``; 401
``unauthorized`` (429 per peer address after too many failures); 403 ``missing_scope`` /
``out_of_scope``; 429 ``rate_limited`` with ``Retry-After`` (the credential's rate); 404
``unknown_agent`` (no map); 503 ``unavailable`` (``load_maps`` raised
:class:`StoreUnavailable`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from monitor.auth.admission import Authorize, admit
from monitor.auth.authorizer import Denied, Grant, out_of_scope
from monitor.core.errors import StoreUnavailable
from monitor.core.http_guard import Guard, Refusal
from monitor.core.http_reply import Reply, error_reply, json_reply


class HasDict(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


async def answer_calibration(
    agent_id: str,
    *,
    headers: Mapping[str, str],
    peer: str | None,
    authorize: Authorize,
    guard: Guard,
    load_maps: Callable[[str], Awaitable[Sequence[HasDict]]],
) -> Reply:
    """The answer to one read (see the module docstring); never raises."""
    answer = await authorize(headers.get("Authorization"))
    if isinstance(answer, Grant) and not answer.allows(agent_id):
        answer = Denied(403, "out_of_scope", out_of_scope(answer, agent_id), answer.key_id)
    grant = admit(answer, peer, guard)
    if isinstance(grant, Refusal):
        return error_reply(grant.status, grant.message, grant.reason, grant.headers)
    try:
        maps = await load_maps(agent_id)
    except StoreUnavailable as exc:
        return error_reply(503, f"store unavailable ({exc})", "unavailable")
    if not maps:
        message = f"no recalibration map for agent {agent_id!r}"
        return json_reply(404, {"error": message, "reason": "unknown_agent", "agent_id": agent_id})
    return json_reply(200, {"agent_id": agent_id, "maps": [m.to_dict() for m in maps]})
