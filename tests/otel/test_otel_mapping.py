"""The OTLP span -> agent-event/v1 mapping (pure: plain ``Span`` values, no I/O)."""

from __future__ import annotations

import json

from monitor.otel.mapping import MappingConfig, kind_of, map_spans
from monitor.otel.spans import STATUS_ERROR, Span, SpanEvent

TRACE = "5b8efff798038103d269b633813fc60c"
CONFIG = MappingConfig()


def span(span_id: str, parent: str = "", name: str = "s", start: int = 1, **attrs: object) -> Span:
    return Span(
        TRACE,
        span_id,
        parent,
        name,
        start * 10**9,
        start * 10**9 + 5 * 10**8,
        dict(attrs),
        resource={"service.name": "svc", "service.version": "2.1"},
    )


def by_id(spans: list[Span], config: MappingConfig = CONFIG) -> dict[str, dict]:
    mapped = map_spans(spans, config)
    return {e.event_id: json.loads(e.to_json()) for e in mapped.events}


def test_kinds_from_both_conventions():
    assert kind_of(span("a" * 16, **{"gen_ai.operation.name": "invoke_agent"})) == "agent"
    assert kind_of(span("a" * 16, **{"openinference.span.kind": "AGENT"})) == "agent"
    assert kind_of(span("a" * 16, **{"gen_ai.operation.name": "chat"})) == "llm"
    assert kind_of(span("a" * 16, **{"openinference.span.kind": "LLM"})) == "llm"
    assert kind_of(span("a" * 16, **{"gen_ai.operation.name": "execute_tool"})) == "tool"
    assert kind_of(span("a" * 16, **{"openinference.span.kind": "TOOL"})) == "tool"
    assert kind_of(span("a" * 16, **{"traceloop.span.kind": "tool"})) == "tool"
    assert kind_of(span("a" * 16, **{"http.method": "GET"})) == "other"


def test_agent_and_conversation_inherited_from_ancestors_else_resource_and_trace():
    root = span(
        "1" * 16,
        **{
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.id": "a-7",
            "gen_ai.agent.name": "Support",
            "gen_ai.conversation.id": "conv-9",
        },
    )
    chat = span(
        "2" * 16,
        "1" * 16,
        start=2,
        **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x"},
    )
    orphan = Span(
        "6" * 32,
        "3" * 16,
        "f" * 16,
        "chat",
        3 * 10**9,
        4 * 10**9,
        {"gen_ai.operation.name": "chat"},
        resource={"service.name": "svc"},
    )
    events = by_id([root, chat, orphan])
    assistant = events[f"otel:{TRACE}:{'2' * 16}:assistant"]
    assert assistant["agent"] == {"id": "a-7", "version": "2.1", "model": "gpt-x"}
    assert assistant["conversation_id"] == "conv-9"
    assert assistant["attributes"]["gen_ai.agent.name"] == "Support"
    lone = events[f"otel:{'6' * 32}:{'3' * 16}:assistant"]
    assert lone["agent"]["id"] == "svc"  # resource service.name
    assert lone["conversation_id"] == "6" * 32  # no conversation id in its trace: the trace


def test_genai_messages_tool_calls_usage_and_escalation_by_call_id():
    out = json.dumps(
        [
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "content": "Let me transfer you."},
                    {
                        "type": "tool_call",
                        "id": "call-1",
                        "name": "transfer_to_human_agents",
                        "arguments": {"summary": "angry"},
                    },
                ],
            }
        ]
    )
    chat = span(
        "2" * 16,
        **{
            "gen_ai.operation.name": "chat",
            "monitor.confidence": 0.42,
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "I want a human"}]}]
            ),
            "gen_ai.output.messages": out,
            "gen_ai.usage.input_tokens": 12,
        },
    )
    tool = span(
        "3" * 16,
        start=2,
        **{
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "transfer_to_human_agents",
            "gen_ai.tool.call.id": "call-1",
        },
    )
    mapped = map_spans([chat, tool], CONFIG)
    ids = [e.event_id for e in mapped.events]
    call_escalation = f"otel:{TRACE}:call:call-1:escalation"
    assert ids.count(call_escalation) == 1  # asked by the model, run by the tool: one event
    events = by_id([chat, tool])
    assert events[f"otel:{TRACE}:{'2' * 16}:user"]["message"]["content"] == "I want a human"
    msg = events[f"otel:{TRACE}:{'2' * 16}:assistant"]
    assert msg["message"]["content"] == "Let me transfer you."
    assert msg["message"]["confidence"] == 0.42
    assert msg["message"]["tool_calls"] == [
        {"id": "call-1", "name": "transfer_to_human_agents", "arguments": {"summary": "angry"}}
    ]
    assert msg["attributes"]["gen_ai.usage.input_tokens"] == 12
    assert events[call_escalation]["escalation"]["trigger"] == "agent"
    assert events[f"otel:{TRACE}:call:call-1:result"]["tool_result"]["ok"] is True


def test_openinference_and_openllmetry_flattened_messages():
    oi = span(
        "2" * 16,
        **{
            "openinference.span.kind": "LLM",
            "llm.model_name": "m-oi",
            "session.id": "s-1",
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": "be nice",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.content": "hello",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c9",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "escalate_ticket",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"p": 1}',
        },
    )
    ll = span(
        "4" * 16,
        start=3,
        **{
            "llm.request.type": "chat",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "hi",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "hey",
        },
    )
    events = by_id([oi, ll])
    user = events[f"otel:{TRACE}:{'2' * 16}:user"]
    assert (user["conversation_id"], user["message"]["content"]) == ("s-1", "hello")
    msg = events[f"otel:{TRACE}:{'2' * 16}:assistant"]
    assert msg["agent"]["model"] == "m-oi"
    assert msg["message"]["tool_calls"][0]["arguments"] == {"p": 1}
    assert f"otel:{TRACE}:call:c9:escalation" in events  # escalate* pattern
    assert events[f"otel:{TRACE}:{'4' * 16}:assistant"]["message"]["content"] == "hey"


def test_semconv_1_26_content_events():
    s = Span(
        TRACE,
        "5" * 16,
        "",
        "chat",
        10,
        20,
        {"gen_ai.operation.name": "chat"},
        (
            SpanEvent(
                "gen_ai.content.completion",
                15,
                {"gen_ai.completion": json.dumps([{"role": "assistant", "content": "ok!"}])},
            ),
        ),
    )
    assert by_id([s])[f"otel:{TRACE}:{'5' * 16}:assistant"]["message"]["content"] == "ok!"


def test_configured_attributes_outcome_escalation_and_failed_tool():
    config = MappingConfig(
        confidence_attributes=("agent.confidence",),
        escalation_tools=("handoff",),
        escalation_attributes=("needs.human",),
    )
    agent = span(
        "1" * 16,
        **{
            "openinference.span.kind": "AGENT",
            "agent.confidence": 0.9,
            "monitor.confidence": 0.1,
            "needs.human": "policy says so",
            "monitor.outcome.success": False,
            "monitor.outcome.reward": 0.25,
        },
    )
    tool = Span(
        TRACE,
        "2" * 16,
        "1" * 16,
        "handoff",
        10,
        20,
        {"openinference.span.kind": "TOOL", "tool.name": "handoff"},
        status_code=STATUS_ERROR,
        status_message="queue full",
    )
    events = by_id([agent, tool], config)
    answer = events[f"otel:{TRACE}:{'1' * 16}:answer"]["message"]
    assert answer["confidence"] == 0.9  # the configured attribute, not the default
    esc = events[f"otel:{TRACE}:{'1' * 16}:escalation"]["escalation"]
    assert esc["reason"] == "policy says so"
    assert esc["confidence"] == 0.9
    assert events[f"otel:{TRACE}:{'1' * 16}:outcome"]["outcome"] == {
        "success": False,
        "reward": 0.25,
        "source": "other",
    }
    result = events[f"otel:{TRACE}:{'2' * 16}:tool_result"]["tool_result"]
    assert (result["ok"], result["error"]) == (False, "queue full")
    assert f"otel:{TRACE}:{'2' * 16}:escalation" in events  # "handoff" is an escalation tool
    assert f"otel:{TRACE}:{'2' * 16}:escalation" not in by_id([agent, tool], CONFIG)


def test_useless_spans_dropped_malformed_rejected_with_reasons():
    useless = span("1" * 16, **{"http.method": "GET"})
    bad_id = span("12345", **{"gen_ai.operation.name": "chat"})
    zero_trace = Span("0" * 32, "2" * 16, "", "chat", 1, 2, {"gen_ai.operation.name": "chat"})
    bad_conf = span("3" * 16, **{"gen_ai.operation.name": "chat", "monitor.confidence": 3.0})
    text_conf = span("4" * 16, **{"gen_ai.operation.name": "chat", "monitor.confidence": "high"})
    good = span("5" * 16, **{"gen_ai.operation.name": "chat"})
    mapped = map_spans([useless, bad_id, zero_trace, bad_conf, text_conf, good], CONFIG)
    assert (mapped.spans, mapped.mapped, mapped.dropped, mapped.rejected) == (6, 1, 1, 4)
    reasons = " | ".join(mapped.errors)
    assert "span_id must be 8" in reasons and "trace_id must be 16" in reasons
    assert "out_of_range" in reasons and "not a number" in reasons
    assert [e.event_id for e in mapped.events] == [f"otel:{TRACE}:{'5' * 16}:assistant"]


def test_event_ids_are_deterministic_and_bounded():
    s = span(
        "6" * 16,
        **{
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "x",
            "gen_ai.tool.call.id": "escalate-" + "z" * 200,
        },
    )
    first = [e.event_id for e in map_spans([s], CONFIG).events]
    assert first == [e.event_id for e in map_spans([s], CONFIG).events]
    assert all(len(i) <= 128 for i in first)


def test_mapping_core_imports_no_io_library():
    import subprocess
    import sys

    code = (
        "import sys, monitor.otel.mapping, monitor.otel.receiver; bad = {'sqlalchemy', "
        "'httpx', 'faust', 'aiokafka', 'asyncpg', 'aiohttp', 'requests'} & "
        "{m.split('.')[0] for m in sys.modules}; print(sorted(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_content_capture_off_still_gives_the_model_call():
    """openai-v2's default (no message content): one assistant message, model and usage kept."""
    s = span(
        "7" * 16,
        **{
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-x",
            "gen_ai.response.model": "gpt-x-0613",
            "gen_ai.usage.output_tokens": 9,
            "gen_ai.provider.name": "openai",
        },
    )
    events = by_id([s])
    assert list(events) == [f"otel:{TRACE}:{'7' * 16}:assistant"]
    msg = events[f"otel:{TRACE}:{'7' * 16}:assistant"]
    assert msg["message"].get("content") is None and not msg["message"].get("tool_calls")
    assert msg["agent"]["model"] == "gpt-x-0613"
    assert msg["attributes"]["gen_ai.usage.output_tokens"] == 9
