"""``receive_logs`` (the /v1/logs logic) with bodies made by the official OTLP log encoders and
records emitted by the official SDK: the same refusals as /v1/traces, GenAI events joined to the
spans of the same trace, other records dropped, events without a span rejected."""

from __future__ import annotations

import gzip
import json

import pytest
from google.rpc import status_pb2
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.json.common._log_encoder import encode_logs as encode_json
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.contract.events import AgentEvent
from monitor.core.errors import MonitorError
from monitor.otel.decode import PROTOBUF, decode_request
from monitor.otel.log_receiver import receive_logs
from monitor.otel.mapping import MappingConfig
from monitor.otel.receiver import Answer, TraceLimits
from monitor.otel.spans import Span
from monitor.otel.traces import TraceAssembler
from tests.otel.test_otel_receiver import BOT, PROTO, authorize, open_guard

LIMITS = TraceLimits(max_body_bytes=64 * 1024, max_spans=20)
MESSAGES_IN = [{"role": "user", "parts": [{"type": "text", "content": "Where is A-17?"}]}]
MESSAGES_OUT = [{"role": "assistant", "parts": [{"type": "text", "content": "It shipped."}]}]


def emitted(
    n_genai: int, n_other: int, without_span: int = 0
) -> tuple[list[ReadableLogRecord], list[Span]]:
    """``n_genai`` chat spans, each with its operation details record (the content), emitted
    inside the span as util-genai does; ``n_other`` plain log records; ``without_span`` GenAI
    records emitted outside any span."""
    spans_out, logs_out = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tp, lp = TracerProvider(), LoggerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans_out))
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs_out))
    tracer, logger = tp.get_tracer("t"), lp.get_logger("t")
    details = {"gen_ai.input.messages": MESSAGES_IN, "gen_ai.output.messages": MESSAGES_OUT}
    for i in range(n_genai):
        with tracer.start_as_current_span(
            "chat m",
            attributes={"gen_ai.operation.name": "chat", "gen_ai.conversation.id": f"c{i}"},
        ):
            logger.emit(
                LogRecord(
                    event_name="gen_ai.client.inference.operation.details", attributes=details
                )
            )
    for i in range(n_other):
        logger.emit(LogRecord(body=f"an application log line {i}"))
    for _ in range(without_span):
        logger.emit(LogRecord(attributes={"event.name": "gen_ai.choice"}, body={"index": 0}))
    finished = spans_out.get_finished_spans()
    spans = decode_request(bytes(encode_spans(finished).SerializeToString()), PROTOBUF)
    return list(logs_out.get_finished_logs()), spans


def proto_body(records: list[ReadableLogRecord]) -> bytes:
    return bytes(encode_logs(records).SerializeToString())


async def post(
    body: bytes,
    *,
    ctype: str = PROTO,
    encoding: str | None = None,
    auth: str | None = "Bearer tok",
    fail: bool = False,
    spans: list[Span] | None = None,
) -> tuple[Answer, list[AgentEvent]]:
    """One logs request; with ``spans``, the spans came in a request before (their trace is
    complete: the records' arrival maps it, through an assembler that holds them)."""
    sent: list[AgentEvent] = []
    pieces = [body]

    async def read_chunk() -> bytes:
        return pieces.pop() if pieces else b""

    async def publish(events: list[AgentEvent]) -> None:
        if fail:
            raise MonitorError("broker down")
        sent.extend(events)

    answer = await receive_logs(
        authorization=auth,
        content_type=ctype,
        content_encoding=encoding,
        content_length=str(len(body)),
        read_chunk=read_chunk,
        publish=publish,
        authorize=authorize,
        limits=LIMITS,
        guard=open_guard(),
        assembler=Holding(spans or []),
    )
    return answer, sent


class Holding(TraceAssembler):
    """An assembler without a store whose requests also carry ``spans`` (sent before)."""

    def __init__(self, spans: list[Span]) -> None:
        super().__init__(MappingConfig())
        self.spans = spans

    async def prepare(self, spans, scope=None, records=()):  # type: ignore[no-untyped-def]
        return await super().prepare([*self.spans, *spans], scope, records)


def response_of(answer: Answer) -> ExportLogsServiceResponse:
    response = ExportLogsServiceResponse()
    response.ParseFromString(answer.body)
    return response


async def test_genai_events_give_their_spans_the_content_and_other_records_are_dropped():
    records, spans = emitted(2, 3)
    for body, encoding in (
        (proto_body(records), None),
        (gzip.compress(proto_body(records)), "gzip"),
    ):
        answer, sent = await post(body, encoding=encoding, spans=spans)
        assert answer.status == 200 and not response_of(answer).HasField("partial_success")
        assert answer.records == {"joined": 2, "dropped": 3}
        texts = sorted((e.conversation_id, e.message.role, e.message.content) for e in sent)
        assert texts == [
            ("c0", "assistant", "It shipped."),
            ("c0", "user", "Where is A-17?"),
            ("c1", "assistant", "It shipped."),
            ("c1", "user", "Where is A-17?"),
        ]
    # the records without their spans (no store to wait in): too late, nothing published
    answer, sent = await post(proto_body(records))
    assert answer.status == 200 and sent == [] and answer.records == {"late": 2, "dropped": 3}


async def test_json_encoding_from_the_official_json_encoder():
    records, spans = emitted(1, 1)
    body = str(encode_json(records).to_json()).encode()
    answer, sent = await post(body, ctype="application/json", spans=spans)
    assert answer.status == 200 and answer.content_type == "application/json"
    assert json.loads(answer.body) == {}
    assert {e.message.content for e in sent} == {"Where is A-17?", "It shipped."}


async def test_genai_events_naming_no_span_are_rejected():
    records, _ = emitted(0, 1, without_span=2)
    answer, sent = await post(proto_body(records))
    response = response_of(answer)
    assert answer.status == 200 and sent == []
    assert response.partial_success.rejected_log_records == 2
    assert "no span context" in response.partial_success.error_message
    assert answer.records == {"rejected": 2, "dropped": 1}


async def test_a_keys_events_of_other_agents_are_rejected_records():
    records, spans = emitted(1, 0)  # the spans' agent: the resource's service name
    answer, sent = await post(proto_body(records), auth=f"Bearer {BOT}", spans=spans)
    response = response_of(answer)
    assert answer.status == 200 and sent == []
    assert response.partial_success.rejected_log_records == 2  # the user and assistant events
    assert "out_of_scope" in response.partial_success.error_message


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"auth": None}, 401, 16),
        ({"auth": "Bearer wrong"}, 401, 16),
        ({"ctype": "text/plain"}, 415, 3),
        ({"encoding": "br"}, 415, 3),
    ],
)
async def test_error_answers_carry_a_status_body(kwargs, status, code):
    records, spans = emitted(1, 0)
    answer, sent = await post(proto_body(records), spans=spans, **kwargs)
    assert answer.status == status and not sent
    if answer.content_type == PROTO:
        status_body = status_pb2.Status()
        status_body.ParseFromString(answer.body)
        assert status_body.code == code
    else:
        assert json.loads(answer.body)["code"] == code


async def test_size_limits_bad_bodies_and_unavailable_bus():
    bomb = gzip.compress(b"\x00" * (LIMITS.max_body_bytes * 4))
    answer, _ = await post(bomb, encoding="gzip")
    assert answer.status == 413
    records, _ = emitted(0, LIMITS.max_spans + 1)
    answer, _ = await post(proto_body(records))
    assert answer.status == 413 and b"log records" in answer.body
    answer, _ = await post(b"\xff\xff\xff")
    assert answer.status == 400
    answer, _ = await post(b"[1, 2]", ctype="application/json")
    assert answer.status == 400 and json.loads(answer.body)["code"] == 3
    records, spans = emitted(1, 0)
    answer, _ = await post(proto_body(records), spans=spans, fail=True)
    assert answer.status == 503 and answer.headers == {"Retry-After": "5"}
