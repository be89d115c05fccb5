"""OTLP/HTTP trace request bodies -> ``Span`` lists, with the official ``opentelemetry-proto``.

``decode_request(body, kind)`` accepts ``application/x-protobuf`` and ``application/json``
(OTLP/JSON: lowerCamelCase keys, trace and span ids as hex strings, per the OTLP specification
1.x) bodies, already decompressed (:mod:`monitor.core.http_body` streams ``Content-Encoding``).
``encode_response`` / ``encode_status`` write the OTLP answers in the request's encoding:
``ExportTraceServiceResponse`` (with ``partial_success``) and ``google.rpc.Status``.

Raises ``UnsupportedMediaType`` (-> 415) and ``UndecodableBody`` (-> 400).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from monitor.core.errors import UndecodableBody, UnsupportedMediaType
from monitor.otel.spans import Span, SpanEvent

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_PARENT_IS_REMOTE = 0x200  # SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK


def media_type(content_type: str | None) -> str:
    """``PROTOBUF`` or ``JSON`` for a Content-Type header; raises UnsupportedMediaType."""
    base = (content_type or "").split(";")[0].strip().lower()
    if base in (PROTOBUF, JSON):
        return base
    raise UnsupportedMediaType(
        f"Content-Type {content_type!r} is not supported: send {PROTOBUF} or {JSON}"
    )


def decode_request(body: bytes, kind: str) -> list[Span]:
    """Every span of an ExportTraceServiceRequest ``body`` encoded as ``kind``."""
    request = ExportTraceServiceRequest()
    parse_into(request, body, kind, ("resourceSpans", "scopeSpans", "spans"))
    spans: list[Span] = []
    for rs in request.resource_spans:
        resource = attributes_of(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(
                    Span(
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        name=s.name,
                        start_unix_nano=s.start_time_unix_nano,
                        end_unix_nano=s.end_time_unix_nano,
                        attributes=attributes_of(s.attributes),
                        events=tuple(
                            SpanEvent(e.name, e.time_unix_nano, attributes_of(e.attributes))
                            for e in s.events
                        ),
                        status_code=s.status.code,
                        status_message=s.status.message,
                        resource=resource,
                        parent_remote=bool(s.flags & _PARENT_IS_REMOTE),
                    )
                )
    return spans


def encode_response(kind: str, rejected: int = 0, message: str = "") -> bytes:
    """An ExportTraceServiceResponse; ``partial_success`` set when something was rejected."""
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if kind == PROTOBUF:
        return bytes(response.SerializeToString())
    return json.dumps(json_format.MessageToDict(response)).encode()


def encode_status(kind: str, code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` body (``code`` is the gRPC code) for an error answer."""
    status = status_pb2.Status(code=code, message=message)
    if kind == PROTOBUF:
        return bytes(status.SerializeToString())
    return json.dumps(json_format.MessageToDict(status)).encode()


def parse_into(request: Message, body: bytes, kind: str, path: tuple[str, str, str]) -> None:
    """Fill the OTLP ``request`` from ``body`` encoded as ``kind``; ``path``: the JSON keys of
    its resource list, scope list and item list (``resourceSpans``, ``scopeSpans``, ``spans``),
    whose ids OTLP/JSON writes as hex. Raises UndecodableBody."""
    name = type(request).__name__
    if kind == PROTOBUF:
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise UndecodableBody(f"not an OTLP {name}: {exc}") from None
        return
    try:
        data = json.loads(body)
        _hex_ids_to_base64(data, path)
        json_format.ParseDict(data, request, ignore_unknown_fields=True)
    except (ValueError, TypeError, AttributeError, json_format.ParseError) as exc:
        raise UndecodableBody(f"not an OTLP/JSON {name}: {exc}") from None


# what OpenInference's TraceConfig writes in place of a hidden input or output (its
# ``REDACTED_VALUE``): a value withheld, not a text anyone said
REDACTED = "__REDACTED__"


def attributes_of(pairs: Any) -> dict[str, Any]:
    """OTLP ``KeyValue`` pairs as a dict of Python values (see :func:`value_of`); an attribute
    whose value is the redaction marker (:data:`REDACTED`) is left out: the instrumentation
    withheld it, as if it had not written it."""
    out = {kv.key: value_of(kv.value) for kv in pairs}
    if REDACTED in out.values():
        return {k: v for k, v in out.items() if v != REDACTED}
    return out


def value_of(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as Python: scalars, lists, dicts; bytes as hex; empty as None."""
    which = value.WhichOneof("value")
    if which == "string_value":  # most attributes: first
        return value.string_value
    if which is None:
        return None
    if which == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def _hex_ids_to_base64(data: Any, path: tuple[str, str, str]) -> None:
    """OTLP/JSON carries ids as hex; protobuf's JSON mapping expects bytes as base64."""
    if not isinstance(data, dict):
        raise TypeError("the body must be a JSON object")
    resources, scopes, items = (_both(key) for key in path)
    for rs in _list(data, resources):
        for ss in _list(rs, scopes):
            for item in _list(ss, items):
                _fix(item)
                for link in item.get("links") or []:
                    _fix(link)


def _both(camel: str) -> tuple[str, str]:
    """A JSON key in lowerCamelCase and in snake_case (both are accepted)."""
    return camel, "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


def _list(obj: Any, keys: tuple[str, str]) -> list[Any]:
    if not isinstance(obj, dict):
        raise TypeError("expected a JSON object")
    found = obj.get(keys[0]) or obj.get(keys[1]) or []
    if not isinstance(found, list):
        raise TypeError(f"{keys[0]} must be a list")
    return [x for x in found if isinstance(x, dict)]


_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _fix(obj: dict[str, Any]) -> None:
    for key in _ID_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            try:
                obj[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:  # left empty: the mapping rejects the span, not the request
                obj[key] = ""
