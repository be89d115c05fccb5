"""``receive_traces`` (the /v1/traces logic) with bodies made by the official OTLP encoders."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime

import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.json.common._internal.trace_encoder import (
    encode_spans as encode_json,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.auth.authorizer import Authorizer, Denied, Grant
from monitor.auth.keys import ApiKey, hash_secret, new_secret
from monitor.contract.events import AgentEvent
from monitor.core.errors import MonitorError
from monitor.core.http_guard import Guard
from monitor.core.rate_limit import Rate, RateLimiter
from monitor.otel.mapping import MappingConfig
from monitor.otel.receiver import Answer, TraceLimits, receive_traces

PROTO = "application/x-protobuf"
LIMITS = TraceLimits(max_body_bytes=64 * 1024, max_spans=20)
BOT = new_secret()  # an API key with the write scope for agent "bot" only
AUTHORIZER = Authorizer(
    {hash_secret(BOT): ApiKey("key_bot", "", hash_secret(BOT), ("bot",), ("write",))},
    {"write": "tok"},
    lambda: datetime(2026, 1, 1, tzinfo=UTC),
)


async def authorize(authorization: str | None) -> Grant | Denied:
    return AUTHORIZER.check(authorization, "write")


def open_guard() -> Guard:
    unlimited = Rate(0, 1)
    return Guard(RateLimiter(unlimited, lambda: 0.0), RateLimiter(unlimited, lambda: 0.0))


def sdk_spans(n: int, confidence: float = 0.7) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for i in range(n):
        with tracer.start_as_current_span(
            "chat",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.conversation.id": f"c{i}",
                "monitor.confidence": confidence,
            },
        ):
            pass
    return list(memory.get_finished_spans())


def proto_body(spans: list[ReadableSpan]) -> bytes:
    return bytes(encode_spans(spans).SerializeToString())


def json_body(spans: list[ReadableSpan]) -> bytes:
    return str(encode_json(spans).to_json()).encode()  # what the JSON exporter posts


async def post(
    body: bytes,
    *,
    ctype: str = PROTO,
    encoding: str | None = None,
    auth: str | None = "Bearer tok",
    length: str | None = None,
    fail: bool = False,
) -> tuple[Answer, list[AgentEvent]]:
    sent: list[AgentEvent] = []

    pieces = [body]

    async def read_chunk() -> bytes:
        return pieces.pop() if pieces else b""

    async def publish(events: list[AgentEvent]) -> None:
        if fail:
            raise MonitorError("broker down")
        sent.extend(events)

    answer = await receive_traces(
        authorization=auth,
        content_type=ctype,
        content_encoding=encoding,
        content_length=length if length is not None else str(len(body)),
        read_chunk=read_chunk,
        publish=publish,
        authorize=authorize,
        limits=LIMITS,
        config=MappingConfig(),
        guard=open_guard(),
    )
    return answer, sent


def status_of(answer: Answer) -> status_pb2.Status:
    status = status_pb2.Status()
    status.ParseFromString(answer.body)
    return status


async def test_protobuf_and_gzip_bodies_are_accepted():
    spans = sdk_spans(3)
    for body, encoding in (
        (proto_body(spans), None),
        (gzip.compress(proto_body(spans)), "gzip"),
        (gzip.compress(proto_body(spans)), "x-gzip"),
    ):
        answer, sent = await post(body, encoding=encoding)
        assert answer.status == 200
        response = ExportTraceServiceResponse()
        response.ParseFromString(answer.body)
        assert not response.HasField("partial_success")
        assert sorted(e.conversation_id for e in sent) == ["c0", "c1", "c2"]
        assert answer.counts == {"mapped": 3, "dropped": 0, "rejected": 0, "events": 3}


async def test_a_keys_events_of_other_agents_are_rejected_spans():
    answer, sent = await post(proto_body(sdk_spans(2)), auth=f"Bearer {BOT}")  # agent "svc"
    assert answer.status == 200 and not sent
    response = ExportTraceServiceResponse()
    response.ParseFromString(answer.body)
    assert response.partial_success.rejected_spans == 2
    assert "out_of_scope" in response.partial_success.error_message
    assert answer.counts["rejected"] == 2 and answer.counts["events"] == 0
    answer, sent = await post(proto_body(sdk_spans(2)))  # the shared token: every agent
    assert answer.status == 200 and len(sent) == 2


async def test_json_encoding_from_the_official_json_encoder():
    spans = sdk_spans(2)
    answer, sent = await post(json_body(spans), ctype="application/json; charset=utf-8")
    assert answer.status == 200 and answer.content_type == "application/json"
    assert json.loads(answer.body) == {}
    want = {f"otel:{s.context.trace_id:032x}:{s.context.span_id:016x}:assistant" for s in spans}
    assert {e.event_id for e in sent} == want


async def test_partial_success_counts_rejected_spans():
    answer, sent = await post(proto_body(sdk_spans(2) + sdk_spans(1, confidence=2.0)))
    response = ExportTraceServiceResponse()
    response.ParseFromString(answer.body)
    assert response.partial_success.rejected_spans == 1
    assert "confidence" in response.partial_success.error_message
    assert len(sent) == 2


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"auth": None}, 401, 16),
        ({"auth": "Bearer wrong"}, 401, 16),
        ({"ctype": "text/plain"}, 415, 3),
        ({"encoding": "br"}, 415, 3),
        ({"length": str(10**9)}, 413, 8),
    ],
)
async def test_error_answers_carry_a_status_body(kwargs, status, code):
    answer, sent = await post(proto_body(sdk_spans(1)), **kwargs)
    assert answer.status == status and not sent
    if answer.content_type == PROTO:
        assert status_of(answer).code == code
    else:
        assert json.loads(answer.body)["code"] == code


async def test_size_limits_bad_bodies_and_unavailable_bus():
    answer, _ = await post(b"\x00" * (LIMITS.max_body_bytes + 1), length="0")
    assert answer.status == 413
    bomb = gzip.compress(b"\x00" * (LIMITS.max_body_bytes * 4))
    answer, _ = await post(bomb, encoding="gzip")
    assert answer.status == 413 and "decompressed" in status_of(answer).message
    answer, _ = await post(proto_body(sdk_spans(LIMITS.max_spans + 1)))
    assert answer.status == 413 and "spans" in status_of(answer).message
    answer, _ = await post(b"\xff\xff\xff")
    assert answer.status == 400
    answer, _ = await post(b"[1, 2]", ctype="application/json")
    assert answer.status == 400 and json.loads(answer.body)["code"] == 3
    answer, _ = await post(proto_body(sdk_spans(1)), fail=True)
    assert answer.status == 503 and answer.headers == {"Retry-After": "5"}
