"""``POST /v1/events``: parse a JSON array or NDJSON body into per-event verdicts (pure).

Status codes chosen by ``respond``:
- 401 missing or wrong bearer token (checked by the caller with ``token_ok``);
- 413 body above ``max_body_bytes`` or more than ``max_events`` events;
- 400 body that is neither a JSON array nor NDJSON (nothing is accepted);
- 202 every event accepted; 207 some accepted, some rejected; 422 every event rejected.
The response body lists each event by its 0-based ``index`` in the request, ``accepted`` with
its ``event_id`` or ``rejected`` with ``reason``, ``field`` and ``detail``.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass, field
from typing import Any

from monitor.errors import InvalidEvent
from monitor.events import MAX_EVENT_BYTES, AgentEvent, decode_event, validate_event


@dataclass
class Verdicts:
    """The parsed request: accepted events and per-index results, in request order."""

    accepted: list[AgentEvent] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)

    def accept(self, index: int, event: AgentEvent) -> None:
        self.accepted.append(event)
        self.results.append({"index": index, "status": "accepted", "event_id": event.event_id})

    def reject(self, index: int, exc: InvalidEvent) -> None:
        self.results.append({"index": index, "status": "rejected", **exc.as_dict()})

    @property
    def rejected(self) -> int:
        return len(self.results) - len(self.accepted)


class RequestTooLarge(Exception):
    """The request exceeds a size limit (-> 413)."""


class BadBody(Exception):
    """The body is neither a JSON array nor NDJSON (-> 400)."""


def token_ok(header: str | None, expected: str | None) -> bool:
    """True when ``header`` is ``Bearer <expected>`` (constant-time compare); False if unset."""
    if not expected or not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), expected.encode())


def parse_events(body: bytes, *, max_body_bytes: int, max_events: int) -> Verdicts:
    """Validate every event of a JSON array or NDJSON ``body``.

    Raises:
        RequestTooLarge: ``body`` longer than ``max_body_bytes`` or more than ``max_events``.
        BadBody: a body starting with ``[`` that is not a JSON array, or an empty body.
    """
    if len(body) > max_body_bytes:
        raise RequestTooLarge(f"body is {len(body)} bytes, limit is {max_body_bytes}")
    text = body.lstrip()
    if not text:
        raise BadBody("empty body: send a JSON array or NDJSON, one event per line")
    verdicts = Verdicts()
    if text.startswith(b"["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise BadBody(f"body starts with '[' but is not a JSON array: {exc}") from None
        if len(items) > max_events:
            raise RequestTooLarge(f"{len(items)} events, limit is {max_events}")
        for i, item in enumerate(items):
            try:
                size = len(json.dumps(item, separators=(",", ":")).encode())
                if size > MAX_EVENT_BYTES:
                    raise InvalidEvent(
                        "oversize", None, f"event is {size} bytes, limit is {MAX_EVENT_BYTES}"
                    )
                verdicts.accept(i, validate_event(item))
            except InvalidEvent as exc:
                verdicts.reject(i, exc)
        return verdicts
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > max_events:
        raise RequestTooLarge(f"{len(lines)} events, limit is {max_events}")
    for i, line in enumerate(lines):
        try:
            verdicts.accept(i, decode_event(line))
        except InvalidEvent as exc:
            verdicts.reject(i, exc)
    return verdicts


def status_for(verdicts: Verdicts) -> int:
    """202 all accepted, 207 mixed, 422 none accepted."""
    if not verdicts.accepted:
        return 422
    return 207 if verdicts.rejected else 202


def response_body(verdicts: Verdicts) -> dict[str, Any]:
    return {
        "accepted": len(verdicts.accepted),
        "rejected": verdicts.rejected,
        "results": verdicts.results,
    }
