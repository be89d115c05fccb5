"""``answer_calibration`` (GET /v1/calibration/{agent}): token, rates and the store's answers."""

from __future__ import annotations

import json
from typing import Any

from monitor.analytics.calibration_endpoint import StoreUnavailable, answer_calibration
from monitor.core.http_guard import Guard
from monitor.core.rate_limit import Rate, RateLimiter


class Map:
    def to_dict(self) -> dict[str, Any]:
        return {"domain": "", "version": 3}


def guard(per_s: float = 0.0) -> Guard:
    return Guard(RateLimiter(Rate(per_s, 1), lambda: 0.0), RateLimiter(Rate(0, 1), lambda: 0.0))


async def ask(token: str | None, header: str | None, g: Guard, loaded: Any) -> tuple[int, Any]:
    loads: list[str] = []

    async def load_maps(agent_id: str) -> list[Map]:
        loads.append(agent_id)
        if isinstance(loaded, Exception):
            raise loaded
        return list(loaded)

    headers = {"Authorization": header} if header else {}
    reply = await answer_calibration(
        "bot", headers=headers, peer="10.1.1.1", token=token, guard=g, load_maps=load_maps
    )
    return reply.status, {**json.loads(reply.body), "loads": loads, **reply.headers}


async def test_calibration_answers() -> None:
    status, body = await ask(None, None, guard(), [Map()])
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
