"""``answer_calibration`` (GET /v1/calibration/{agent}): credential, scope, rates and the
store's answers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from monitor.analytics.calibration_endpoint import answer_calibration
from monitor.auth.authorizer import Authorizer, Denied, Grant
from monitor.auth.keys import ApiKey, hash_secret, new_secret
from monitor.core.errors import StoreUnavailable
from monitor.core.http_guard import Guard
from monitor.core.rate_limit import Rate, RateLimiter

OTHERS = new_secret()  # a read key for other agents
WRITER = new_secret()  # a key without the read scope
KEYS = {
    hash_secret(OTHERS): ApiKey("key_o", "", hash_secret(OTHERS), ("team-*",), ("read",)),
    hash_secret(WRITER): ApiKey("key_w", "", hash_secret(WRITER), ("*",), ("write",)),
}


class Map:
    def to_dict(self) -> dict[str, Any]:
        return {"domain": "", "version": 3}


def guard(per_s: float = 0.0) -> Guard:
    return Guard(RateLimiter(Rate(per_s, 1), lambda: 0.0), RateLimiter(Rate(0, 1), lambda: 0.0))


async def ask(token: str | None, header: str | None, g: Guard, loaded: Any) -> tuple[int, Any]:
    loads: list[str] = []
    checks = Authorizer(KEYS, {"read": token}, lambda: datetime(2026, 1, 1, tzinfo=UTC))

    async def authorize(authorization: str | None) -> Grant | Denied:
        return checks.check(authorization, "read")

    async def load_maps(agent_id: str) -> list[Map]:
        loads.append(agent_id)
        if isinstance(loaded, Exception):
            raise loaded
        return list(loaded)

    headers = {"Authorization": header} if header else {}
    reply = await answer_calibration(
        "bot", headers=headers, peer="10.1.1.1", authorize=authorize, guard=g, load_maps=load_maps
    )
    return reply.status, {**json.loads(reply.body), "loads": loads, **reply.headers}


async def test_calibration_answers() -> None:
    status, body = await ask("t", "Bearer t", guard(), [Map()])
    assert status == 200 and body["maps"] == [{"domain": "", "version": 3}]
    status, body = await ask("t", "Bearer no", guard(), [Map()])
    assert status == 401 and body["reason"] == "unauthorized" and body["loads"] == []
    status, body = await ask("t", "Bearer t", guard(), [])
    assert status == 404 and body["reason"] == "unknown_agent"
    status, body = await ask("t", "Bearer t", guard(), StoreUnavailable("OSError"))
    assert status == 503 and body["reason"] == "unavailable"
    g = guard(per_s=1)
    assert (await ask("t", "Bearer t", g, [Map()]))[0] == 200
    status, body = await ask("t", "Bearer t", g, [Map()])
    assert status == 429 and body["Retry-After"] == "1" and body["loads"] == []


async def test_calibration_requires_a_credential_for_the_agent() -> None:
    status, body = await ask(None, None, guard(), [Map()])  # no read token: still a credential
    assert status == 401 and body["loads"] == []
    status, body = await ask(None, f"Bearer {OTHERS}", guard(), [Map()])
    assert (status, body["reason"], body["loads"]) == (403, "out_of_scope", [])
    status, body = await ask(None, f"Bearer {WRITER}", guard(), [Map()])
    assert (status, body["reason"], body["loads"]) == (403, "missing_scope", [])
