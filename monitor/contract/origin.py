"""Who may write a gate decision id: the reserved ``gate:`` prefix and the decision events'
origin tag (pure: hmac and hashlib only).

The gate (``POST /v1/gate``) stores each decision as an ``agent-event/v1`` event whose
``event_id`` starts with :data:`RESERVED_PREFIX`, published to the same topic as every other
event. An ingested event could claim such an id first and make the gate's later decision a
conflicting duplicate that is never stored, so an event with a reserved id is accepted only
with the Kafka header :data:`ORIGIN_HEADER` holding :func:`origin_tag` of its exact value
bytes under the worker's origin key: HTTP ingest and OTLP never accept one (their clients set
no Kafka headers), and a producer writing to Kafka directly cannot compute the tag without
the key. Refused events get reason ``reserved_id`` on field ``event_id``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from monitor.core.errors import InvalidEvent

RESERVED_PREFIX = "gate:"
ORIGIN_HEADER = "monitor-origin"


def origin_tag(key: bytes, value: bytes) -> bytes:
    """The origin header of a decision event's serialized ``value`` (hex HMAC-SHA256)."""
    return hmac.new(key, value, hashlib.sha256).hexdigest().encode()


def is_reserved(event_id: str) -> bool:
    """True for an id only the gate's own decision events may carry."""
    return event_id.startswith(RESERVED_PREFIX)


def reserved_id(event_id: str) -> InvalidEvent:
    """The ``reserved_id`` error of an ingested event claiming a gate decision id."""
    return InvalidEvent(
        "reserved_id",
        "event_id",
        f"event_id {event_id[:140]!r}: ids starting with "
        f"{RESERVED_PREFIX!r} are the gate's decision ids; only the gate writes them",
    )


def check_origin(
    event_id: str,
    value: bytes,
    headers: Iterable[tuple[str, bytes | None]] | None,
    key: bytes | None,
) -> None:
    """Raise ``reserved_id`` when ``event_id`` is reserved and ``headers`` carry no valid
    origin tag of ``value`` under ``key`` (``key`` None: no reserved id is accepted)."""
    if not is_reserved(event_id):
        return
    if key is not None:
        want = origin_tag(key, value)
        for name, tag in headers or ():
            if name == ORIGIN_HEADER and tag is not None and hmac.compare_digest(tag, want):
                return
    raise reserved_id(event_id)
