"""Capture the spans of real instrumentations as OTLP/JSON fixtures (tests/data/otel/).

    .venv/bin/python -m tests.otel.capture
    .venv/bin/python -m tests.otel.capture --check FLAVOR   # exit 0 iff every case is exact

Each fixture is one conversation of the conformance suite (tests/otel/api_agents.py,
tests/otel/framework_agents.py) played against the loopback provider under the real
instrumentation, its spans encoded by the official OTLP/JSON encoder: exactly what the
exporter would post to ``/v1/traces``. tests/data/otel/README.md lists them with the package
versions they were captured with; tests/otel/test_otel_mapping_apis.py reads them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.otel.conformance import cases_for, instrumented, play

DATA = Path(__file__).resolve().parent.parent / "data" / "otel"
FIXTURES = {  # file -> (flavor, case)
    "responses_openinference_parallel_tools.json": ("responses", "parallel_tools"),
    "anthropic_openllmetry_parallel_tools.json": ("anthropic_ll", "parallel_tools"),
    "anthropic_openinference_provider_500.json": ("anthropic_oi", "provider_500"),
    "pydantic_ai_provider_500.json": ("pydantic_ai", "provider_500"),
}


async def capture(flavor: str, case: str) -> tuple[bytes, list[tuple[object, ...]]]:
    """The OTLP/JSON body of one conversation's spans, and its truth."""
    memory = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    with instrumented(flavor, tp):
        chosen = [c for c in cases_for(flavor) if c.name == case]
        truths = await play(flavor, tp, chosen, f"fixture-{flavor}")
    body = json.dumps(
        json.loads(str(encode_spans(memory.get_finished_spans()).to_json())), indent=1
    )
    (truth,) = truths.values()
    return body.encode(), truth.entries


async def check(flavor: str) -> bool:
    """Every case of ``flavor`` mapped exactly (protobuf)? In a process of its own: an
    instrumentor that does not undo all it patched (Traceloop's openai 0.62.4) must not leave
    the next tests' clients patched."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as proto

    from monitor.otel.decode import PROTOBUF, decode_request
    from monitor.otel.mapping import MappingConfig, map_spans
    from tests.otel.test_otel_conformance_spans import by_conversation

    memory = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    with instrumented(flavor, tp):
        truths = await play(flavor, tp, cases_for(flavor), flavor)
    body = proto(memory.get_finished_spans()).SerializeToString()
    got = by_conversation(map_spans(decode_request(body, PROTOBUF), MappingConfig()))
    exact = True
    for cid, truth in truths.items():
        if got.get(cid) != truth.entries:
            print(cid, "differs:", got.get(cid), "!=", truth.entries)
            exact = False
    return exact


async def main() -> None:
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    DATA.mkdir(parents=True, exist_ok=True)
    for name, (flavor, case) in FIXTURES.items():
        body, truth = await capture(flavor, case)
        (DATA / name).write_bytes(body)
        print(name, len(body), "bytes;", len(truth), "truth entries")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--check"]:
        sys.exit(0 if asyncio.run(check(sys.argv[2])) else 1)
    asyncio.run(main())
