"""``POST /v1/events``: parse a JSON body into per-event results (pure).

A body is a JSON array of events, a single JSON object (compact or pretty-printed), or NDJSON
(one event per line). It is parsed by the same parser, with the same depth limit, as Kafka
records (:func:`monitor.contract.limits.parse_json`), and each event passes the same
:func:`monitor.contract.events.validate_event`, so an event gets the same result both ways.

Status codes (every answer is a JSON object):
- 401 / 403 / 429 / 415 / 408 before the body is parsed (:mod:`monitor.ingest.endpoint`: the
  credential, an API key with the ``write`` scope or ``MONITOR_INGEST_TOKEN``, :mod:`monitor.auth`);
  a key's events of other agents are rejected per event (``out_of_scope``, ``allows``);
- 413 body above ``max_body_bytes`` or more than ``max_events`` events;
- 400 body that is neither a JSON array, an object nor NDJSON (nothing is accepted);
- 202 every event accepted; 207 some accepted, some rejected; 422 every event rejected;
- 503 the event bus did not take the accepted events.

All-or-nothing per request: every event is validated and serialized before the first one is
produced, so no error about the body can follow a partial write. A 503 (the only 5xx) means the
bus failed: some accepted events may have reached it, and the client re-sends the same request;
the store keeps each ``event_id`` once, so the retry completes the request without duplicates.
The response body lists each event by its 0-based ``index`` in the request, ``accepted`` with
its ``event_id`` or ``rejected`` with ``reason``, ``field`` and ``detail``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from monitor.contract.events import MAX_EVENT_BYTES, AgentEvent, decode_event, validate_event
from monitor.contract.limits import check_json_depth, may_hold_nul, parse_json
from monitor.contract.origin import is_reserved, reserved_id
from monitor.core.errors import BadBody, BodyTooLarge, InvalidEvent


@dataclass
class ParsedBatch:
    """The parsed request: accepted events and per-index results, in request order.
    ``allows`` (the caller's credential) refuses events of other agents (``out_of_scope``)."""

    accepted: list[AgentEvent] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    allows: Callable[[str], bool] | None = None

    def accept(self, index: int, event: AgentEvent) -> None:
        if is_reserved(event.event_id):  # only the gate writes its decision ids
            self.reject(index, reserved_id(event.event_id))
            return
        if self.allows is not None and not self.allows(event.agent.id):
            detail = f"agent {event.agent.id!r} is outside the scope of this request's key"
            self.reject(index, InvalidEvent("out_of_scope", "agent.id", detail))
            return
        self.accepted.append(event)
        self.results.append({"index": index, "status": "accepted", "event_id": event.event_id})

    def reject(self, index: int, exc: InvalidEvent) -> None:
        self.results.append({"index": index, "status": "rejected", **exc.as_dict()})

    @property
    def rejected(self) -> int:
        return len(self.results) - len(self.accepted)


def parse_events(
    body: bytes,
    *,
    max_body_bytes: int,
    max_events: int,
    now: datetime | None = None,
    max_future_skew: timedelta | None = None,
    allows: Callable[[str], bool] | None = None,
) -> ParsedBatch:
    """Validate every event of a JSON array, single JSON object or NDJSON ``body``.

    ``now`` and ``max_future_skew`` reject events too far ahead (``future_timestamp``);
    ``allows`` (of the caller's key) rejects events of other agents (``out_of_scope``); an
    event claiming a gate decision id is rejected (``reserved_id``).

    Raises:
        BodyTooLarge: ``body`` longer than ``max_body_bytes`` or more than ``max_events``.
        BadBody: a body starting with ``[`` that is not a JSON array, or an empty body.
    """
    if len(body) > max_body_bytes:
        raise BodyTooLarge(f"body is {len(body)} bytes, limit is {max_body_bytes}")
    text = body.lstrip()
    if not text:
        raise BadBody("empty body: send a JSON array, an object or NDJSON, one event per line")
    batch = ParsedBatch(allows=allows)
    limits: dict[str, Any] = {"now": now, "max_future_skew": max_future_skew}
    parsed = {**limits, "check_chars": may_hold_nul(text)}  # for values parsed from ``text``
    if text.startswith(b"{"):
        try:
            single = parse_json(text)
        except InvalidEvent as exc:
            if exc.reason == "too_deep":
                batch.reject(0, exc)
                return batch
            single = None  # several lines: NDJSON below
        if isinstance(single, dict):
            try:
                if len(text) > MAX_EVENT_BYTES:
                    raise InvalidEvent(
                        "oversize", None, f"event is {len(text)} bytes, limit is {MAX_EVENT_BYTES}"
                    )
                batch.accept(0, validate_event(single, **parsed))
            except InvalidEvent as exc:
                batch.reject(0, exc)
            return batch
    if text.startswith(b"["):
        try:
            items = parse_json(text, check_depth=False)
        except InvalidEvent as exc:
            raise BadBody(f"body starts with '[' but is not a JSON array: {exc.detail}") from None
        if not isinstance(items, list):
            raise BadBody("body starts with '[' but is not a JSON array")
        if len(items) > max_events:
            raise BodyTooLarge(f"{len(items)} events, limit is {max_events}")
        for i, item in enumerate(items):
            try:
                check_json_depth(item)
                size = len(json.dumps(item, separators=(",", ":")).encode())
                if size > MAX_EVENT_BYTES:
                    raise InvalidEvent(
                        "oversize", None, f"event is {size} bytes, limit is {MAX_EVENT_BYTES}"
                    )
                batch.accept(i, validate_event(item, **parsed))
            except InvalidEvent as exc:
                batch.reject(i, exc)
        return batch
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > max_events:
        raise BodyTooLarge(f"{len(lines)} events, limit is {max_events}")
    for i, line in enumerate(lines):
        try:
            batch.accept(i, decode_event(line, **limits))
        except InvalidEvent as exc:
            batch.reject(i, exc)
    return batch


def status_for(batch: ParsedBatch) -> int:
    """202 all accepted, 207 mixed, 422 none accepted."""
    if not batch.accepted:
        return 422
    return 207 if batch.rejected else 202


def response_body(batch: ParsedBatch) -> dict[str, Any]:
    return {
        "accepted": len(batch.accepted),
        "rejected": batch.rejected,
        "results": batch.results,
    }
