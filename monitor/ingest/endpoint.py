"""``POST /v1/events`` as a framework-neutral async function; the worker only wires it.

Order of work (refuse before working): the credential, asked of the injected ``authorize``
(:mod:`monitor.auth`: an API key with the ``write`` scope or ``MONITOR_INGEST_TOKEN``; 401, 429
per peer address after too many failures, 403 ``missing_scope``), the credential's request rate
(429 with ``Retry-After``, :func:`monitor.auth.admission.admit`), the media type (415:
``application/json``, ``application/x-ndjson``, ``application/ndjson``, or none for clients that
send none: the body is sniffed as before), the encoding (415: identity, gzip, deflate), then the
body, streamed under :class:`monitor.core.http_body.BodyLimits` (413 declared or streamed above
the limit or a decompression bomb; 408 not arrived within the deadline; 400 corrupt gzip).
A body above ``inline_parse_bytes`` is parsed and validated through ``offload`` (a thread),
so a large batch does not hold the event loop. The answers of :mod:`monitor.ingest.http`
follow (a key's events of other agents are rejected per event, ``out_of_scope``), and 503
``busy`` (``Retry-After``) when no body slot frees up within the read deadline;
every answer is a JSON object, errors carry ``error`` and ``reason``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from monitor.auth.admission import Authorize, admit
from monitor.auth.authorizer import Grant
from monitor.contract.events import Publish
from monitor.core.errors import BadBody, BadEncoding, BodyTimeout, BodyTooLarge, Busy
from monitor.core.http_body import BodyLimits, ReadChunk, body_slot, declared_too_large, read_body
from monitor.core.http_guard import Guard, Refusal, unreadable
from monitor.core.http_reply import Offload, Reply, error_reply, json_reply
from monitor.core.throttled_log import ThrottledExceptionLog
from monitor.ingest.http import ParsedBatch, parse_events, response_body, status_for

log = logging.getLogger("monitor.ingest.endpoint")
# a body any authenticated client can send: its traceback once a minute per kind, not per request
_unparsed = ThrottledExceptionLog(log)
MEDIA_TYPES = ("application/json", "application/x-ndjson", "application/ndjson", "")


@dataclass(frozen=True)
class IngestLimits:
    """The body limits, events per request, the clock skew allowed and the body size parsed
    on the event loop (larger ones go through ``offload``)."""

    body: BodyLimits
    max_events: int
    max_future_skew: timedelta
    inline_parse_bytes: int = 64 * 1024


def refused(refusal: Refusal) -> Reply:
    return error_reply(refusal.status, refusal.message, refusal.reason, refusal.headers)


async def receive_events(
    *,
    headers: Mapping[str, str],
    peer: str | None,
    read_chunk: ReadChunk,
    publish: Publish,
    authorize: Authorize,
    limits: IngestLimits,
    guard: Guard,
    now: Callable[[], datetime],
    offload: Offload,
    slots: asyncio.Semaphore | None = None,
) -> Reply:
    """Handle one ingest request (see the module docstring); never raises for a body.
    ``counts`` of the reply: ``accepted`` and ``rejected`` events. ``slots`` bounds the
    requests reading, parsing and publishing a body at once (503 ``busy`` when none frees up
    within the read deadline)."""
    grant = admit(await authorize(headers.get("Authorization")), peer, guard)
    if isinstance(grant, Refusal):
        return refused(grant)
    unread = unreadable(headers, MEDIA_TYPES)
    if unread is not None:
        return refused(unread)
    if declared_too_large(headers.get("Content-Length"), limits.body):
        return error_reply(413, f"body over {limits.body.max_bytes} bytes", "too_large")
    try:
        async with body_slot(slots, limits.body.timeout_s):
            return await _ingest(headers, read_chunk, publish, limits, now, offload, grant)
    except Busy as exc:
        return error_reply(503, str(exc), "busy", {"Retry-After": "1"})


async def _ingest(
    headers: Mapping[str, str],
    read_chunk: ReadChunk,
    publish: Publish,
    limits: IngestLimits,
    now: Callable[[], datetime],
    offload: Offload,
    grant: Grant,
) -> Reply:
    """Read, parse and publish one admitted request (events outside ``grant`` rejected)."""
    try:
        body = await read_body(
            read_chunk,
            content_length=headers.get("Content-Length"),
            content_encoding=headers.get("Content-Encoding"),
            limits=limits.body,
        )
    except BodyTooLarge as exc:
        return error_reply(413, str(exc), "too_large")
    except BodyTimeout as exc:
        return error_reply(408, str(exc), "timeout", {"Connection": "close"})
    except BadEncoding as exc:
        return error_reply(400, str(exc), "bad_encoding")

    def parse() -> ParsedBatch:
        return parse_events(
            body,
            max_body_bytes=limits.body.max_bytes,
            max_events=limits.max_events,
            now=now(),
            max_future_skew=limits.max_future_skew,
            allows=grant.allows,
        )

    try:
        batch = parse() if len(body) <= limits.inline_parse_bytes else await offload(parse)
    except BodyTooLarge as exc:
        return error_reply(413, str(exc), "too_large")
    except BadBody as exc:
        return error_reply(400, str(exc), "bad_body")
    except Exception as exc:  # never a 500 for a body: nothing was produced yet
        _unparsed.exception("HTTP ingest could not parse a body", exc)
        return error_reply(400, f"unreadable body ({type(exc).__name__})", "bad_body")
    if batch.accepted:
        try:
            await publish(batch.accepted)
        except Exception as exc:  # the bus failed: some events may be out, the client re-sends
            log.error("HTTP ingest could not publish: %s", exc)
            return error_reply(
                503,
                f"event bus unavailable ({type(exc).__name__}): re-send the request, stored "
                "events are deduplicated by event_id",
                "bus_unavailable",
            )
    reply = json_reply(status_for(batch), response_body(batch))
    reply.counts = {"accepted": len(batch.accepted), "rejected": batch.rejected}
    return reply
