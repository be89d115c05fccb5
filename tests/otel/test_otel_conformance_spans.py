"""Conformance of the transcript reconstruction on the spans the real instrumentations emit.

The support agent (tests/otel/support_agent.py) plays every case against the loopback provider
under ``opentelemetry-instrumentation-openai-v2`` + util-genai and under
``openinference-instrumentation-openai``; the spans go through the official OTLP encoders
(protobuf and JSON) and the monitor's decoder, then the mapping. Per conversation, the
reconstructed transcript must equal what the agent really sent and received. The end-to-end
path (worker, Kafka, Postgres, split exports, restarts) is tests/otel/test_otel_conformance.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as json_spans
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.otel.decode import JSON, PROTOBUF, decode_request
from monitor.otel.mapping import MappingConfig, map_spans
from tests.otel.conformance import FLAVORS, cases_for, instrumented, play, transcript


@pytest.fixture(params=["SPAN_ONLY", "SPAN_AND_EVENT"])
def capture(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", request.param)
    return str(request.param)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("encoding", [PROTOBUF, JSON])
async def test_every_case_reconstructed_exactly(flavor: str, encoding: str, capture: str):
    memory = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    with instrumented(flavor, tp):
        truths = await play(flavor, tp, cases_for(flavor), flavor)
    finished = list(memory.get_finished_spans())
    if encoding == PROTOBUF:
        body = encode_spans(finished).SerializeToString()
    else:
        body = str(json_spans(finished).to_json()).encode()  # what the JSON exporter posts
    spans = decode_request(body, encoding)
    mapped = map_spans(spans, MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    by_conv: dict[str, list[dict]] = {}
    unique: dict[str, Any] = {}
    for e in mapped.events:  # the first of an id, as the store keeps it
        unique.setdefault(e.event_id, e)
    for e in unique.values():
        by_conv.setdefault(e.conversation_id, []).append(json.loads(e.to_json()))
    assert set(by_conv) == set(truths)
    for cid, truth in truths.items():
        assert transcript(by_conv[cid]) == truth.entries, cid
    # one event id twice only for what a conversation's later trace repeats: its system prompt
    counts: dict[str, int] = {}
    for e in mapped.events:
        counts[e.event_id] = counts.get(e.event_id, 0) + 1
    assert all(":system:" in i for i, n in counts.items() if n > 1), counts
