"""An agent instrumented with OpenTelemetry only (GenAI semantic conventions), no monitor SDK.

It simulates support conversations and emits, per conversation, the spans an instrumented
framework emits: ``invoke_agent`` (root) > ``chat`` (model call) > ``execute_tool``. The only
monitor-specific attributes are the ones no convention defines: ``monitor.confidence`` and
``monitor.outcome.success`` on the ``invoke_agent`` span (docs/otel.md). Everything else is the
standard OTel SDK configured by the standard environment variables:

    make demo                               # or: monitor up (worker on 127.0.0.1:6066)
    export OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:6066/v1/traces
    export OTEL_EXPORTER_OTLP_TRACES_HEADERS="Authorization=Bearer%20$MONITOR_INGEST_TOKEN"
    export OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf     # or http/json
    export OTEL_EXPORTER_OTLP_TRACES_COMPRESSION=gzip
    export OTEL_SERVICE_NAME=otel-support-bot
    python examples/otel_agent.py --conversations 200
    monitor calibration && monitor escalation

Needs ``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http`` (or
``opentelemetry-exporter-otlp-json-http`` for ``http/json``). ``--seed`` fixes the trace and
span ids too, so running it twice with the same seed re-sends the same spans (the monitor stores
them once).
"""

from __future__ import annotations

import argparse
import json
import os
import random

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

ESCALATE_BELOW = 0.35


class SeededIds(IdGenerator):
    """Reproducible trace/span ids (a real agent keeps the SDK's random ids)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"ids-{seed}")

    def generate_span_id(self) -> int:
        return self.rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self.rng.getrandbits(128) or 1


def exporter() -> SpanExporter:
    """The OTLP/HTTP exporter named by OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (the SDK reads the
    endpoint, headers and compression from their OTEL_EXPORTER_OTLP_TRACES_* variables)."""
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    if protocol == "http/json":
        from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as Json

        return Json()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Proto

    return Proto()


def messages(role: str, text: str | None, call: tuple[str, str] | None = None) -> str:
    parts: list[dict[str, object]] = []
    if text is not None:
        parts.append({"type": "text", "content": text})
    if call is not None:
        parts.append({"type": "tool_call", "id": call[0], "name": call[1], "arguments": {}})
    return json.dumps([{"role": role, "parts": parts}])


def conversation(tracer: trace.Tracer, rng: random.Random, agent: str, cid: str) -> None:
    """One conversation: a chat call, maybe a tool, and the outcome (success ~ confidence)."""
    confidence = round(rng.uniform(0.05, 0.99), 3)
    escalate = confidence < ESCALATE_BELOW
    common = {"gen_ai.agent.name": agent, "gen_ai.conversation.id": cid}
    question = rng.choice(["Where is my order?", "Cancel my flight", "Change my seat"])
    with tracer.start_as_current_span(f"invoke_agent {agent}") as root:
        root.set_attributes({**common, "gen_ai.operation.name": "invoke_agent"})
        tool = "transfer_to_human_agents" if escalate else "lookup_order"
        call_id = f"call-{cid}"
        with tracer.start_as_current_span("chat demo-model") as chat:
            chat.set_attributes({
                **common,
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "demo-model",
                "gen_ai.usage.input_tokens": rng.randint(50, 400),
                "gen_ai.usage.output_tokens": rng.randint(10, 200),
                "gen_ai.input.messages": messages("user", question),
                "gen_ai.output.messages": messages("assistant", None, (call_id, tool)),
            })
        with tracer.start_as_current_span(f"execute_tool {tool}") as span:
            span.set_attributes({**common, "gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id})
        answer = "A human agent will take over." if escalate else "Done: it is on its way."
        root.set_attributes({
            "gen_ai.input.messages": messages("user", question),
            "gen_ai.output.messages": messages("assistant", answer),
            "monitor.confidence": confidence,
            "monitor.outcome.success": rng.random() < confidence,
        })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--agent", default="otel-support-bot")
    args = parser.parse_args()
    service = os.environ.get("OTEL_SERVICE_NAME", args.agent)
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}), id_generator=SeededIds(args.seed)
    )
    provider.add_span_processor(BatchSpanProcessor(exporter()))
    tracer = provider.get_tracer("examples.otel_agent")
    rng = random.Random(args.seed)
    for i in range(args.conversations):
        conversation(tracer, rng, args.agent, f"otel-{args.seed}-{i}")
    provider.shutdown()  # flushes the last batch
    print(f"exported {args.conversations} conversations as {args.agent!r}")


if __name__ == "__main__":
    main()
