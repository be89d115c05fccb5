"""``POST /v1/traces`` (OTLP/HTTP) as a pure async function; app.py only wires it to faust.

Answers per the OTLP/HTTP specification, in the request's encoding (protobuf or JSON):
- 200 ``ExportTraceServiceResponse``; ``partial_success`` carries ``rejected_spans`` and the
  first reasons when some spans were malformed or mapped to invalid events (the others are
  published). Spans carrying nothing the monitor uses are dropped and counted, not rejected;
- 401 missing or wrong bearer token (``MONITOR_INGEST_TOKEN``, as ``/v1/events``; unset: off);
- 413 declared or actual body (after gzip) above ``http_max_body_bytes``, or more spans than
  ``http_max_events``; 415 other media type or content encoding; 400 undecodable body;
- 503 (retryable, ``Retry-After``) when the event bus refuses the events.
Error bodies are ``google.rpc.Status``. Accepted events go through ``publish`` (the same
producer path as ``/v1/events``) before the answer is sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from monitor.contract.events import AgentEvent
from monitor.core.errors import MonitorError
from monitor.ingest.http import token_ok
from monitor.otel.decode import (
    JSON,
    PROTOBUF,
    BodyTooLarge,
    UndecodableBody,
    UnsupportedMediaType,
    decode_request,
    encode_response,
    encode_status,
    inflate,
    media_type,
)
from monitor.otel.mapping import MappingConfig
from monitor.otel.traces import TraceAssembler

# gRPC codes of the google.rpc.Status bodies
INVALID_ARGUMENT = 3
RESOURCE_EXHAUSTED = 8
UNAVAILABLE = 14
UNAUTHENTICATED = 16


@dataclass(frozen=True)
class TraceLimits:
    token: str | None
    max_body_bytes: int
    max_spans: int


@dataclass
class Answer:
    """What to send back, and the span counts (accepted/dropped/rejected) for the metrics."""

    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)  # failed calls by kind
    traces: dict[str, int] = field(default_factory=dict)  # traces settled by how


def _error(kind: str, status: int, code: int, message: str, **headers: str) -> Answer:
    return Answer(status, encode_status(kind, code, message), kind, dict(headers))


async def receive_traces(
    *,
    authorization: str | None,
    content_type: str | None,
    content_encoding: str | None,
    content_length: str | None,
    read: Callable[[], Awaitable[bytes]],
    publish: Callable[[list[AgentEvent]], Awaitable[None]],
    limits: TraceLimits,
    config: MappingConfig,
    assembler: TraceAssembler | None = None,
) -> Answer:
    """Handle one export request (see the module docstring for the answers)."""
    try:
        kind = media_type(content_type)
    except UnsupportedMediaType as exc:
        return _error(JSON, 415, INVALID_ARGUMENT, str(exc))
    if not token_ok(authorization, limits.token):
        return _error(kind, 401, UNAUTHENTICATED, "missing or wrong bearer token")
    declared = content_length or "0"
    if declared.isdigit() and int(declared) > limits.max_body_bytes:
        return _error(kind, 413, RESOURCE_EXHAUSTED, f"body over {limits.max_body_bytes} bytes")
    try:
        body = await read()  # may raise BodyTooLarge while streaming (the worker reads in chunks)
        if len(body) > limits.max_body_bytes:
            raise BodyTooLarge(f"body is {len(body)} bytes, limit is {limits.max_body_bytes}")
        spans = decode_request(inflate(body, content_encoding, limits.max_body_bytes), kind)
    except UnsupportedMediaType as exc:
        return _error(kind, 415, INVALID_ARGUMENT, str(exc))
    except BodyTooLarge as exc:
        return _error(kind, 413, RESOURCE_EXHAUSTED, str(exc))
    except UndecodableBody as exc:
        return _error(kind, 400, INVALID_ARGUMENT, str(exc))
    if len(spans) > limits.max_spans:
        message = f"{len(spans)} spans, limit is {limits.max_spans}"
        return _error(kind, 413, RESOURCE_EXHAUSTED, message)
    assembler = assembler or TraceAssembler(config)  # whole traces (docs/otel.md)
    try:
        prepared = await assembler.handle(spans, publish)
        mapped = prepared.mapped
    except MonitorError as exc:
        return _error(
            kind, 503, UNAVAILABLE, f"event bus unavailable: {exc}", **{"Retry-After": "5"}
        )
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
