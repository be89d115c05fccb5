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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

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
from monitor.otel.mapping import Mapped, MappingConfig
from monitor.otel.spans import Span
from monitor.otel.traces import Prepared, TraceAssembler

T = TypeVar("T")
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
    trace's root, ``failures``: failed calls by kind, ``traces``: traces settled by how,
    ``records``: log records by fate (``/v1/logs``)."""

    failures: dict[str, int] = field(default_factory=dict)
    traces: dict[str, int] = field(default_factory=dict)
    records: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TraceLimits:
    max_body_bytes: int
    max_spans: int  # spans of a trace request, records of a log request
    read_timeout_s: float = 10.0
    max_inflate_ratio: float = 100.0
    inline_parse_bytes: int = 64 * 1024

    @property
    def body(self) -> BodyLimits:
        return BodyLimits(self.max_body_bytes, self.max_inflate_ratio, self.read_timeout_s)


def error(kind: str, status: int, code: int, message: str, **headers: str) -> Answer:
    """An error answer: ``google.rpc.Status`` with the gRPC ``code`` in the request's encoding."""
    return Answer(status, encode_status(kind, code, message), kind, dict(headers))


def _refused(kind: str, refusal: Refusal) -> Answer:
    code = STATUS_CODES.get(refusal.status, RESOURCE_EXHAUSTED)
    return error(kind, refusal.status, code, refusal.message, **refusal.headers)


Handle = Callable[[bytes, str, Grant], Awaitable[Answer]]  # a read body, its kind, the grant


async def receive_otlp(
    *,
    authorization: str | None,
    content_type: str | None,
    content_encoding: str | None,
    content_length: str | None,
    read_chunk: ReadChunk,
    authorize: Authorize,
    limits: TraceLimits,
    guard: Guard,
    handle: Handle,
    peer: str | None = None,
    slots: asyncio.Semaphore | None = None,
) -> Answer:
    """The steps every OTLP/HTTP export request takes before its signal's ``handle``:
    admission, media type, content encoding, declared size, a body slot (503 when none frees
    up), the body read under ``limits`` (see the module docstring for the answers)."""
    try:
        kind: str | None = media_type(content_type)
    except UnsupportedMediaType:
        kind = None
    grant = admit(await authorize(authorization), peer, guard)
    if isinstance(grant, Refusal):
        return _refused(kind or JSON, grant)
    if kind is None:
        message = f"Content-Type {content_type!r} is not supported: send {PROTOBUF} or {JSON}"
        return error(JSON, 415, INVALID_ARGUMENT, message)
    try:
        encoding_of(content_encoding)
    except UnsupportedEncoding as exc:
        return error(kind, 415, INVALID_ARGUMENT, str(exc))
    if declared_too_large(content_length, limits.body):
        return error(kind, 413, RESOURCE_EXHAUSTED, f"body over {limits.max_body_bytes} bytes")
    try:
        async with body_slot(slots, limits.read_timeout_s):
            try:
                body = await read_body(
                    read_chunk,
                    content_length=content_length,
                    content_encoding=content_encoding,
                    limits=limits.body,
                )
            except BodyTooLarge as exc:
                return error(kind, 413, RESOURCE_EXHAUSTED, str(exc))
            except BodyTimeout as exc:
                return error(kind, 408, DEADLINE_EXCEEDED, str(exc), Connection="close")
            except BadEncoding as exc:
                return error(kind, 400, INVALID_ARGUMENT, str(exc))
            return await handle(body, kind, grant)
    except Busy as exc:
        return error(kind, 503, UNAVAILABLE, str(exc), **{"Retry-After": "1"})


class Scoped:
    """A publish that keeps the events of agents ``grant`` allows and notes the others
    (``out_of_scope``, rejected in the answer)."""

    def __init__(self, grant: Grant, publish: Publish) -> None:
        self.grant = grant
        self.publish = publish
        self.out_of_scope: list[str] = []

    async def __call__(self, events: list[AgentEvent]) -> None:
        kept = [e for e in events if self.grant.allows(e.agent.id)]
        self.out_of_scope.extend(
            f"out_of_scope: agent {e.agent.id[:140]!r} is outside the scope of this key"
            for e in events
            if not self.grant.allows(e.agent.id)
        )
        if kept:
            await self.publish(kept)

    def settle(self, prepared: Prepared) -> Mapped:
        """``prepared``'s mapping with the events outside the grant rejected."""
        mapped = prepared.mapped
        for reason in self.out_of_scope:
            mapped.reject(reason)
        mapped.events = [e for e in mapped.events if self.grant.allows(e.agent.id)]
        return mapped


async def decode_within(
    body: bytes,
    kind: str,
    decode: Callable[[bytes, str], T],
    size: Callable[[T], int],
    what: str,
    limits: TraceLimits,
    offload: Offload,
) -> T | Answer:
    """``decode(body, kind)`` (through ``offload`` above ``inline_parse_bytes``), or the answer
    refusing it: 400 undecodable, 413 more ``what`` than ``max_spans``."""

    def run() -> T:
        decoded = decode(body, kind)
        if size(decoded) > limits.max_spans:
            raise BodyTooLarge(f"{size(decoded)} {what}, limit is {limits.max_spans}")
        return decoded

    try:
        return run() if len(body) <= limits.inline_parse_bytes else await offload(run)
    except UndecodableBody as exc:
        return error(kind, 400, INVALID_ARGUMENT, str(exc))
    except BodyTooLarge as exc:
        return error(kind, 413, RESOURCE_EXHAUSTED, str(exc))


async def unless_unavailable(kind: str, export: Callable[[], Awaitable[Answer]]) -> Answer:
    """``export()``'s 200 answer in ``kind``, or 503 (retryable) when the event bus or the
    store refused."""
    try:
        answer = await export()
    except MonitorError as exc:
        message = f"event bus unavailable: {exc}"
        return error(kind, 503, UNAVAILABLE, message, **{"Retry-After": "5"})
    answer.content_type = kind
    return answer


def outcome(prepared: Prepared, mapped: Mapped) -> Answer:
    """The counts of a handled request on a 200 answer whose body the caller sets."""
    answer = Answer(200, b"")
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
    answer.records = dict(prepared.records)
    return answer


async def export_spans(
    spans: list[Span], grant: Grant, publish: Publish, assembler: TraceAssembler
) -> tuple[Answer, Mapped]:
    """Map and publish decoded spans under ``grant`` (events outside it rejected); raises
    MonitorError when the event bus or the store is unavailable."""
    scoped = Scoped(grant, publish)
    prepared = await assembler.handle(spans, scoped, grant.agents)
    mapped = scoped.settle(prepared)
    return outcome(prepared, mapped), mapped


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
    traces = assembler or TraceAssembler(config)

    async def handle(body: bytes, kind: str, grant: Grant) -> Answer:
        spans = await decode_within(body, kind, decode_request, len, "spans", limits, offload)
        if isinstance(spans, Answer):
            return spans

        async def export() -> Answer:
            answer, mapped = await export_spans(spans, grant, publish, traces)
            answer.body = encode_response(kind, mapped.rejected, "; ".join(mapped.errors))
            return answer

        return await unless_unavailable(kind, export)

    return await receive_otlp(
        authorization=authorization,
        content_type=content_type,
        content_encoding=content_encoding,
        content_length=content_length,
        read_chunk=read_chunk,
        authorize=authorize,
        limits=limits,
        guard=guard,
        handle=handle,
        peer=peer,
        slots=slots,
    )


__all__ = [
    "JSON",
    "PROTOBUF",
    "Answer",
    "Scoped",
    "TraceLimits",
    "decode_within",
    "error",
    "export_spans",
    "outcome",
    "receive_otlp",
    "receive_traces",
    "unless_unavailable",
]
