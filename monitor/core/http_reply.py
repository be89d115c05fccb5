"""A framework-neutral HTTP answer (status, body, media type, headers) and the offloading of
CPU-heavy request work.

The endpoints (``receive_events``, ``receive_gate``, ``receive_traces``) return a
:class:`Reply`; the worker turns it into its web framework's response. ``counts`` carry figures
for the worker's metrics. :class:`Offload` runs a CPU-heavy step (parsing a large batch) away
from the event loop; :func:`inline` runs it in place (tests, small bodies).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
JSON_TYPE = "application/json"


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = JSON_TYPE
    headers: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


def json_reply(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, json.dumps(body).encode(), JSON_TYPE, dict(headers or {}))


def error_reply(
    status: int, error: str, reason: str, headers: dict[str, str] | None = None
) -> Reply:
    """The JSON error of every 4xx: ``{"error": <message>, "reason": <machine-readable>}``."""
    return json_reply(status, {"error": error, "reason": reason}, headers)


class Offload(Protocol):
    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


async def inline(fn: Callable[[], T], /) -> T:
    """Runs ``fn`` on the caller's loop (an :class:`Offload` that does not offload)."""
    return fn()
