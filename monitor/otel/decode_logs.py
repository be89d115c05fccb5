"""OTLP/HTTP log request bodies -> GenAI event records, with the official ``opentelemetry-proto``.

``decode_logs(body, kind)`` accepts an ``ExportLogsServiceRequest`` as ``application/x-protobuf``
or ``application/json`` (ids as hex), already decompressed, and sorts its records: the GenAI
events (:mod:`monitor.otel.log_events`; the event name is the record's ``event_name``, else its
``event.name`` attribute) that name their span, the GenAI events that do not (rejected: they
cannot be joined to a span), and the count of other records (dropped). ``encode_logs_response``
writes the ``ExportLogsServiceResponse``. Raises ``UndecodableBody`` (-> 400).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

from monitor.otel.decode import PROTOBUF, attributes_of, parse_into, value_of
from monitor.otel.log_events import LogEvent, is_genai

_PATH = ("resourceLogs", "scopeLogs", "logRecords")


@dataclass
class LogBatch:
    """The records of one request: ``events`` to join, ``rejected`` reasons (GenAI events with
    no span context), ``other``: records that are not GenAI events."""

    events: list[LogEvent] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    other: int = 0

    @property
    def records(self) -> int:
        return len(self.events) + len(self.rejected) + self.other


def decode_logs(body: bytes, kind: str) -> LogBatch:
    """The records of an ExportLogsServiceRequest ``body`` encoded as ``kind``."""
    request = ExportLogsServiceRequest()
    parse_into(request, body, kind, _PATH)
    out = LogBatch()
    seq = 0
    for rl in request.resource_logs:
        for sl in rl.scope_logs:
            for r in sl.log_records:
                attributes = attributes_of(r.attributes)
                name = r.event_name or str(attributes.get("event.name") or "")
                if not is_genai(name):
                    out.other += 1
                    continue
                event = LogEvent(
                    trace_id=r.trace_id.hex(),
                    span_id=r.span_id.hex(),
                    name=name,
                    time_unix_nano=r.time_unix_nano or r.observed_time_unix_nano,
                    seq=seq,
                    attributes=attributes,
                    body=value_of(r.body),
                )
                seq += 1
                reason = event.well_formed
                if reason is None:
                    out.events.append(event)
                else:
                    out.rejected.append(reason)
    return out


def encode_logs_response(kind: str, rejected: int = 0, message: str = "") -> bytes:
    """An ExportLogsServiceResponse; ``partial_success`` set when something was rejected."""
    response = ExportLogsServiceResponse()
    if rejected or message:
        response.partial_success.rejected_log_records = rejected
        response.partial_success.error_message = message
    if kind == PROTOBUF:
        return bytes(response.SerializeToString())
    return json.dumps(json_format.MessageToDict(response)).encode()
