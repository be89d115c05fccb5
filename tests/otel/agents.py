"""OTel-instrumented agents for the /v1/traces tests: real instrumentation libraries
(``opentelemetry-instrumentation-openai-v2`` and OpenInference's ``openinference-instrumentation-
openai``) around a real ``AsyncOpenAI`` client talking to the loopback ``ChatServer``.

Each ``run_*`` function plays conversations and returns the finished spans (collected in memory
so the test can export the same spans several times with the real OTLP exporters).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from openai import AsyncOpenAI
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from tests.servers.llm_server import ChatServer, Reply


@dataclass(frozen=True)
class Plan:
    """One conversation: the agent's confidence, whether it escalates, its outcome."""

    conversation_id: str
    confidence: float
    escalate: bool
    success: bool
    tool_fails: bool = False


def tool_call_reply(call_id: str, name: str, model: str) -> Reply:
    body = {
        "id": f"r-{call_id}",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps({"why": "policy"})},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }
    return Reply(None, raw=json.dumps(body))


@contextmanager
def collecting(service: str) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    try:
        yield provider, memory
    finally:
        provider.shutdown()


async def _talk(
    server: ChatServer,
    client: AsyncOpenAI,
    plan: Plan,
    model: str,
    tool_span: Any,
    tool_attrs: dict[str, Any],
) -> None:
    """Model call -> tool -> model call, as an agent loop does."""
    call_id = f"call-{plan.conversation_id}"
    tool = "transfer_to_human_agents" if plan.escalate else "lookup_order"
    server.push(tool_call_reply(call_id, tool, model), Reply("Here is what I found."))
    history: list[Any] = [{"role": "user", "content": f"help with {plan.conversation_id}"}]
    first = await client.chat.completions.create(model=model, messages=history)
    with tool_span(tool, call_id) as span:
        span.set_attributes(tool_attrs)
        if plan.tool_fails:
            span.set_status(Status(StatusCode.ERROR, "order service timed out"))
    history += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call_id, "content": "ok"},
    ]
    await client.chat.completions.create(model=model, messages=history)


async def run_genai(server: ChatServer, plans: list[Plan], agent: str) -> list[ReadableSpan]:
    """GenAI semconv: openai-v2 instrumentation (content on spans), manual agent/tool spans."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    with collecting("genai-service") as (provider, memory):
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        tracer = provider.get_tracer("test.genai")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        try:
            for plan in plans:
                with tracer.start_as_current_span(f"invoke_agent {agent}") as root:
                    root.set_attributes(
                        {
                            "gen_ai.operation.name": "invoke_agent",
                            "gen_ai.agent.name": agent,
                            "gen_ai.conversation.id": plan.conversation_id,
                        }
                    )

                    def tool_span(name: str, call_id: str) -> Any:
                        return tracer.start_as_current_span(
                            f"execute_tool {name}",
                            attributes={
                                "gen_ai.operation.name": "execute_tool",
                                "gen_ai.tool.name": name,
                                "gen_ai.tool.call.id": call_id,
                            },
                        )

                    await _talk(
                        server,
                        client,
                        plan,
                        "gpt-test",
                        tool_span,
                        {"gen_ai.tool.call.result": "done"},
                    )
                    root.set_attributes(
                        {
                            "monitor.confidence": plan.confidence,
                            "monitor.outcome.success": plan.success,
                        }
                    )
                with tracer.start_as_current_span("GET /healthz"):  # nothing to map: dropped
                    pass
        finally:
            instrumentor.uninstrument()
        return list(memory.get_finished_spans())


async def run_openinference(
    server: ChatServer, plans: list[Plan], agent: str
) -> list[ReadableSpan]:
    """OpenInference: the OpenAI instrumentor, AGENT/TOOL spans, ``using_session``."""
    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai import OpenAIInstrumentor

    with collecting("oi-service") as (provider, memory):
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        tracer = provider.get_tracer("test.oi")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        try:
            for plan in plans:
                with (
                    using_session(plan.conversation_id),
                    tracer.start_as_current_span(
                        agent,
                        attributes={
                            "openinference.span.kind": "AGENT",
                            "agent.name": agent,
                            "session.id": plan.conversation_id,
                            "input.value": "where is my order?",
                        },
                    ) as root,
                ):

                    def tool_span(name: str, call_id: str, cid: str = plan.conversation_id) -> Any:
                        return tracer.start_as_current_span(
                            name,
                            attributes={
                                "openinference.span.kind": "TOOL",
                                "tool.name": name,
                                "tool_call.id": call_id,
                                "session.id": cid,
                            },
                        )

                    await _talk(
                        server,
                        client,
                        plan,
                        "oi-model",
                        tool_span,
                        {"output.value": '{"status": "shipped"}'},
                    )
                    root.set_attributes(
                        {
                            "output.value": "It has shipped.",
                            "monitor.confidence": plan.confidence,
                            "monitor.outcome.success": plan.success,
                        }
                    )
                with tracer.start_as_current_span(
                    "retriever-cache", attributes={"openinference.span.kind": "CHAIN"}
                ):  # nothing to map: dropped
                    pass
        finally:
            instrumentor.uninstrument()
        return list(memory.get_finished_spans())
