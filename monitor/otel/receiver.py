"""``POST /v1/traces`` (OTLP/HTTP) as a pure async function; app.py only wires it to faust.

Refuses before working, in this order: the credential, asked of the injected ``authorize``
(as ``/v1/events``: an API key with the ``write`` scope or ``MONITOR_INGEST_TOKEN``; 401, or
429 per peer address after too many failures; 403 a key without the scope), the credential's
request rate (429 with ``Retry-After``, :func:`monitor.auth.admission.admit`), the media type
(415), the encoding (415: identity, gzip, deflate), then the body, streamed under
:class:`monitor.core.http_body.BodyLimits`.
Answers per the OTLP/HTTP specification, in the request's encoding (protobuf or JSON; JSON
when the media type is not one of them):
- 200 ``ExportTraceServiceResponse``; ``partial_success`` carries ``rejected_spans`` and the
  first reasons when some spans were malformed or mapped to invalid events (the others are
  published). Spans carrying nothing the monitor uses are dropped and counted, not rejected.
  A key's events of other agents are rejected there too (``out_of_scope``, counted as
  rejected spans);
- 401 missing or wrong bearer token; 403 a key without the ``write`` scope; 429 rate limited
  (``Retry-After``);
- 413 declared, streamed or inflated body above ``max_body_bytes``, a body inflating more than
  ``max_inflate_ratio`` times, or more spans than ``max_spans``; 408 the body did not arrive
  within ``read_timeout_s``; 415 other media type or content encoding; 400 undecodable body;
- 503 (retryable, ``Retry-After``) when the event bus refuses the events, or when no body
  slot frees up within the read deadline (too many bodies in flight).
Error bodies are ``google.rpc.Status``. A body above ``inline_parse_bytes`` is decoded and
mapped through ``offload`` (a thread). Accepted events go through ``publish`` (the same
producer path as ``/v1/events``) before the answer is sent.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from monitor.auth.admission import Authorize, admit
from monitor.auth.authorizer import Grant
from monitor.contract.events import AgentEvent, Publish
from monitor.core.errors import MonitorError, UndecodableBody, UnsupportedMediaType
from monitor.core.http_body import (
    BadEncoding,
    BodyLimits,
    BodyTimeout,
    BodyTooLarge,
    Busy,
    ReadChunk,
    UnsupportedEncoding,
    body_slot,
    declared_too_large,
    read_body,
)
from monitor.core.http_guard import Guard, Refusal
from monitor.core.http_reply import Offload, Reply, inline
from monitor.core.inflate import encoding_of
from monitor.otel.decode import (
    JSON,
    PROTOBUF,
    decode_request,
    encode_response,
    encode_status,
    media_type,
)
from monitor.otel.mapping import MappingConfig
from monitor.otel.spans import Span
from monitor.otel.traces import TraceAssembler

# gRPC codes of the google.rpc.Status bodies
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
RESOURCE_EXHAUSTED = 8
UNAVAILABLE = 14
UNAUTHENTICATED = 16
PERMISSION_DENIED = 7
STATUS_CODES = {401: UNAUTHENTICATED, 403: PERMISSION_DENIED}  # else RESOURCE_EXHAUSTED (429)


@dataclass
class Answer(Reply):
    """What to send back; ``counts``: mapped/dropped/rejected spans and those waiting for their
    trace's root, ``failures``: failed calls by kind, ``traces``: traces settled by how."""

    failures: dict[str, int] = field(default_factory=dict)
    traces: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TraceLimits:
    max_body_bytes: int
    max_spans: int
    read_timeout_s: float = 10.0
    max_inflate_ratio: float = 100.0
    inline_parse_bytes: int = 64 * 1024

    @property
    def body(self) -> BodyLimits:
        return BodyLimits(self.max_body_bytes, self.max_inflate_ratio, self.read_timeout_s)


def _error(kind: str, status: int, code: int, message: str, **headers: str) -> Answer:
    return Answer(status, encode_status(kind, code, message), kind, dict(headers))


def _refused(kind: str, refusal: Refusal) -> Answer:
    code = STATUS_CODES.get(refusal.status, RESOURCE_EXHAUSTED)
    return _error(kind, refusal.status, code, refusal.message, **refusal.headers)


async def receive_traces(
    *,
    authorization: str | None,
    content_type: str | None,
    content_encoding: str | None,
    content_length: str | None,
    read_chunk: ReadChunk,
    publish: Publish,
    authorize: Authorize,
    limits: TraceLimits,
    config: MappingConfig,
    guard: Guard,
    peer: str | None = None,
    offload: Offload = inline,
    slots: asyncio.Semaphore | None = None,
    assembler: TraceAssembler | None = None,
) -> Answer:
    """Handle one export request (see the module docstring for the answers); ``slots``
    bounds the requests reading and decoding a body at once (503 when none frees up);
    ``assembler`` holds spans whose trace root has not arrived (docs/otel.md; without one,
    each request is mapped on its own)."""
    try:
        kind: str | None = media_type(content_type)
    except UnsupportedMediaType:
        kind = None
    grant = admit(await authorize(authorization), peer, guard)
    if isinstance(grant, Refusal):
        return _refused(kind or JSON, grant)
    if kind is None:
        message = f"Content-Type {content_type!r} is not supported: send {PROTOBUF} or {JSON}"
        return _error(JSON, 415, INVALID_ARGUMENT, message)
    try:
        encoding_of(content_encoding)
    except UnsupportedEncoding as exc:
        return _error(kind, 415, INVALID_ARGUMENT, str(exc))
    if declared_too_large(content_length, limits.body):
        return _error(kind, 413, RESOURCE_EXHAUSTED, f"body over {limits.max_body_bytes} bytes")
    try:
        async with body_slot(slots, limits.read_timeout_s):
            return await _receive(
                kind,
                content_encoding,
                content_length,
                read_chunk,
                publish,
                limits,
                config,
                offload,
                grant,
                assembler or TraceAssembler(config),
            )
    except Busy as exc:
        return _error(kind, 503, UNAVAILABLE, str(exc), **{"Retry-After": "1"})


async def _receive(
    kind: str,
    content_encoding: str | None,
    content_length: str | None,
    read_chunk: ReadChunk,
    publish: Publish,
    limits: TraceLimits,
    config: MappingConfig,
    offload: Offload,
    grant: Grant,
    assembler: TraceAssembler,
) -> Answer:
    """Read, decode, map and publish one admitted request (events outside ``grant``
    rejected)."""
    try:
        body = await read_body(
            read_chunk,
            content_length=content_length,
            content_encoding=content_encoding,
            limits=limits.body,
        )
    except BodyTooLarge as exc:
        return _error(kind, 413, RESOURCE_EXHAUSTED, str(exc))
    except BodyTimeout as exc:
        return _error(kind, 408, DEADLINE_EXCEEDED, str(exc), Connection="close")
    except BadEncoding as exc:
        return _error(kind, 400, INVALID_ARGUMENT, str(exc))

    def decode() -> list[Span]:
        spans = decode_request(body, kind)
        if len(spans) > limits.max_spans:
            raise BodyTooLarge(f"{len(spans)} spans, limit is {limits.max_spans}")
        return spans

    try:
        spans = decode() if len(body) <= limits.inline_parse_bytes else await offload(decode)
    except UndecodableBody as exc:
        return _error(kind, 400, INVALID_ARGUMENT, str(exc))
    except BodyTooLarge as exc:
        return _error(kind, 413, RESOURCE_EXHAUSTED, str(exc))
    out_of_scope: list[str] = []

    async def publish_in_scope(events: list[AgentEvent]) -> None:
        kept = [e for e in events if grant.allows(e.agent.id)]
        out_of_scope.extend(
            f"out_of_scope: agent {e.agent.id[:140]!r} is outside the scope of this key"
            for e in events
            if not grant.allows(e.agent.id)
        )
        if kept:
            await publish(kept)

    try:
        prepared = await assembler.handle(spans, publish_in_scope, grant.agents)
    except MonitorError as exc:
        message = f"event bus unavailable: {exc}"
        return _error(kind, 503, UNAVAILABLE, message, **{"Retry-After": "5"})
    mapped = prepared.mapped
    for reason in out_of_scope:
        mapped.reject(reason)
    mapped.events = [e for e in mapped.events if grant.allows(e.agent.id)]
    message = "; ".join(mapped.errors)
    answer = Answer(200, encode_response(kind, mapped.rejected, message), kind)
    answer.counts = {
        "mapped": mapped.mapped,
        "dropped": mapped.dropped,
        "rejected": mapped.rejected,
        "events": len(mapped.events),
    }
    if prepared.parked:  # waiting in the store for their trace's root
        answer.counts["waiting"] = prepared.parked
    answer.failures = dict(mapped.failures)
    answer.traces = prepared.resolutions()
    return answer


__all__ = ["JSON", "PROTOBUF", "Answer", "TraceLimits", "receive_traces"]
