"""The transcript reconstruction rules (monitor/otel/mapping.py), one shape each, on plain
``Span`` values: what the instrumentations in the conformance suite do not all exercise."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from monitor.otel.mapping import MappingConfig, map_spans
from monitor.otel.spans import STATUS_ERROR, Span, SpanEvent

TRACE = "7" * 32
CONFIG = MappingConfig()


def msgs(*items: tuple[str, str]) -> str:
    return json.dumps([{"role": r, "parts": [{"type": "text", "content": c}]} for r, c in items])


def chat(
    sid: str, parent: str, start: int, inputs: str, output: str | None = None, **attrs: Any
) -> Span:
    a: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": inputs}
    if output is not None:
        a["gen_ai.output.messages"] = msgs(("assistant", output))
    a.update(attrs)
    return Span(TRACE, sid, parent, "chat", start * 10**9, start * 10**9 + 500, a)


def agent(sid: str = "a" * 16, **attrs: Any) -> Span:
    a = {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "c", **attrs}
    return Span(TRACE, sid, "", "invoke_agent", 10**8, 10**10, a)


def lines(spans: list[Span]) -> list[tuple[Any, ...]]:
    events = [json.loads(e.to_json()) for e in map_spans(spans, CONFIG).events]
    out = []
    for e in sorted(events, key=lambda e: (datetime.fromisoformat(e["ts"]), e["event_id"])):
        body = e.get("message") or e.get("tool_result") or {}
        out.append((e["type"], body.get("role") or body.get("name"), body.get("content")))
    return out


def test_two_calls_on_the_same_turn_take_the_user_message_once():
    root = agent()
    guard = chat("1" * 16, root.span_id, 1, msgs(("user", "refund me")), "ok")
    main = chat("2" * 16, root.span_id, 2, msgs(("user", "refund me")), "Done.")
    assert lines([root, guard, main]) == [
        ("message", "user", "refund me"),
        ("message", "assistant", "ok"),
        ("message", "assistant", "Done."),
    ]


def test_a_genuinely_repeated_user_message_in_a_longer_history_is_kept():
    root = agent()
    first = chat("1" * 16, root.span_id, 1, msgs(("user", "Hi")), "Hello")
    second = chat(
        "2" * 16,
        root.span_id,
        2,
        msgs(("user", "Hi"), ("assistant", "Hello"), ("user", "Hi")),
        "Hello",
    )
    assert [x for x in lines([root, first, second]) if x[1] == "user"] == [
        ("message", "user", "Hi"),
        ("message", "user", "Hi"),
    ]


def test_system_prompt_given_as_instructions_and_as_message_is_stored_once():
    root = agent()
    call = chat(
        "1" * 16,
        root.span_id,
        1,
        msgs(("system", "Be brief."), ("user", "Hi")),
        "Hey",
        **{"gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Be brief."}])},
    )
    assert lines([root, call])[:2] == [
        ("message", "system", "Be brief."),
        ("message", "user", "Hi"),
    ]


def test_only_the_innermost_of_nested_llm_spans_speaks():
    root = agent()
    outer = chat("1" * 16, root.span_id, 1, msgs(("user", "Hi")), "Hey")
    inner = chat("2" * 16, outer.span_id, 2, msgs(("user", "Hi")), "Hey")
    assert lines([root, outer, inner]) == [
        ("message", "user", "Hi"),
        ("message", "assistant", "Hey"),
    ]


def test_agent_answer_not_repeated_and_its_confidence_goes_to_the_last_answer():
    root = agent(
        **{
            "gen_ai.output.messages": msgs(("assistant", "Done.")),
            "monitor.confidence": 0.7,
            "gen_ai.usage.input_tokens": 99,
        }
    )
    first = chat("1" * 16, root.span_id, 1, msgs(("user", "x")), "thinking")
    last = chat("2" * 16, root.span_id, 3, msgs(("user", "x")), "Done.")
    events = [json.loads(e.to_json()) for e in map_spans([root, first, last], CONFIG).events]
    answers = [e for e in events if e["type"] == "message" and e["message"]["role"] == "assistant"]
    assert [a["message"].get("content") for a in answers] == ["thinking", "Done."]
    assert [a["message"].get("confidence") for a in answers] == [None, 0.7]
    assert all("gen_ai.usage.input_tokens" not in a["attributes"] for a in answers)


def test_agent_without_llm_spans_is_the_only_witness():
    root = agent(
        **{
            "openinference.span.kind": "AGENT",
            "input.value": "Where is A-1?",
            "output.value": "Shipped.",
            "gen_ai.operation.name": "x",
        }
    )
    assert lines([root]) == [
        ("message", "user", "Where is A-1?"),
        ("message", "assistant", "Shipped."),
    ]


def test_failed_llm_call_is_an_error_and_no_assistant_message():
    root = agent()
    failed = Span(
        TRACE,
        "1" * 16,
        root.span_id,
        "chat",
        1000,
        2000,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": msgs(("user", "Hi")),
            "gen_ai.output.messages": msgs(("assistant", "partial")),
            "error.type": "<class 'openai.RateLimitError'>",
        },
        status_code=STATUS_ERROR,
        status_message="Error code: 429 - slow down",
    )
    mapped = map_spans([root, failed], CONFIG)
    assert mapped.failures == {"llm_call": 1}
    events = [json.loads(e.to_json()) for e in mapped.events]
    assert [e["type"] for e in events] == ["message", "tool_result"]
    error = events[1]
    assert error["tool_result"]["ok"] is False
    assert error["tool_result"]["name"] == "llm"
    assert error["tool_result"]["error"] == "RateLimitError: Error code: 429 - slow down"
    assert error["attributes"]["http.response.status_code"] == 429
    assert error["attributes"]["error.type"] == "RateLimitError"


def test_failed_agent_alone_is_marked_once():
    exc = SpanEvent("exception", 5, {"exception.type": "TimeoutError", "exception.message": "t"})
    root = Span(
        TRACE,
        "a" * 16,
        "",
        "invoke_agent",
        0,
        10,
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "c"},
        events=(exc,),
        status_code=STATUS_ERROR,
    )
    call = chat("1" * 16, root.span_id, 1, msgs(("user", "Hi")), "Hey")
    mapped = map_spans([root, call], CONFIG)
    assert mapped.failures == {"agent": 1}
    errors = [e for e in mapped.events if e.type == "tool_result"]
    assert [e.tool_result.name for e in errors] == ["agent"]


def test_tool_results_from_tool_messages_when_no_tool_span_and_by_name_without_id():
    root = agent()
    call = {"type": "tool_call", "id": "t1", "name": "lookup", "arguments": {"q": 1}}
    asks = Span(
        TRACE,
        "1" * 16,
        root.span_id,
        "chat",
        1000,
        2000,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": msgs(("user", "find")),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [call]}]),
        },
    )
    history = json.dumps(
        [
            {"role": "user", "parts": [{"type": "text", "content": "find"}]},
            {"role": "assistant", "parts": [call]},
            {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": "t1", "response": "42"}],
            },
        ]
    )
    answers = chat("2" * 16, root.span_id, 3, history, "It is 42.")
    got = [json.loads(e.to_json()) for e in map_spans([root, asks, answers], CONFIG).events]
    results = [e["tool_result"] for e in got if e["type"] == "tool_result"]
    assert results == [{"call_id": "t1", "name": "lookup", "ok": True, "content": "42"}]
    # a tool span without a call id answers the earliest open call of its name
    tool = Span(
        TRACE,
        "3" * 16,
        root.span_id,
        "execute_tool",
        2100,
        2200,
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup",
            "gen_ai.tool.call.result": "42",
        },
    )
    got = [json.loads(e.to_json()) for e in map_spans([root, asks, tool], CONFIG).events]
    results = [e["tool_result"] for e in got if e["type"] == "tool_result"]
    assert results == [{"call_id": "t1", "name": "lookup", "ok": True, "content": "42"}]


def test_content_capture_off_takes_the_agent_span_input_and_output():
    root = agent(**{"input.value": "Where is A-1?", "output.value": "Shipped."})
    bare = Span(
        TRACE,
        "1" * 16,
        root.span_id,
        "chat",
        10**9,
        2 * 10**9,
        {"gen_ai.operation.name": "chat", "gen_ai.usage.output_tokens": 3},
    )
    assert lines([root, bare]) == [
        ("message", "user", "Where is A-1?"),
        ("message", "assistant", "Shipped."),
    ]


def test_a_later_trace_of_the_conversation_does_not_repeat_earlier_tool_results():
    call = {"type": "tool_call", "id": "t1", "name": "lookup", "arguments": {}}
    history = json.dumps(
        [
            {"role": "user", "parts": [{"type": "text", "content": "find"}]},
            {"role": "assistant", "parts": [call]},
            {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": "t1", "response": "42"}],
            },
            {"role": "assistant", "parts": [{"type": "text", "content": "42."}]},
            {"role": "user", "parts": [{"type": "text", "content": "thanks"}]},
        ]
    )
    second_turn = chat("1" * 16, "a" * 16, 1, history, "You are welcome.")
    assert lines([agent(), second_turn]) == [
        ("message", "user", "thanks"),
        ("message", "assistant", "You are welcome."),
    ]


def test_openinference_content_parts():
    llm = Span(
        TRACE,
        "1" * 16,
        "",
        "ChatCompletion",
        10**9,
        2 * 10**9,
        {
            "openinference.span.kind": "LLM",
            "session.id": "s",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.contents.0.message_content.type": "text",
            "llm.input_messages.0.message.contents.0.message_content.text": "Look at",
            "llm.input_messages.0.message.contents.1.message_content.type": "image",
            "llm.input_messages.0.message.contents.2.message_content.text": "this",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Seen.",
        },
    )
    assert lines([llm]) == [("message", "user", "Look at\nthis"), ("message", "assistant", "Seen.")]


def test_agent_answer_after_a_tool_asking_call_is_its_own_and_takes_the_confidence():
    call = {"type": "tool_call", "id": "t1", "name": "lookup", "arguments": {}}
    root = agent(
        **{
            "gen_ai.output.messages": msgs(("assistant", "It is on its way.")),
            "monitor.confidence": 0.8,
        }
    )
    asks = Span(
        TRACE,
        "1" * 16,
        root.span_id,
        "chat",
        10**9,
        2 * 10**9,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": msgs(("user", "Where?")),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [call]}]),
        },
    )
    events = [json.loads(e.to_json()) for e in map_spans([root, asks], CONFIG).events]
    answers = [e for e in events if e["type"] == "message" and e["message"]["role"] == "assistant"]
    answers.sort(key=lambda e: datetime.fromisoformat(e["ts"]))
    assert [
        (
            a["event_id"].rsplit(":", 1)[1],
            a["message"].get("content"),
            a["message"].get("confidence"),
        )
        for a in answers
    ] == [("assistant", None, None), ("answer", "It is on its way.", 0.8)]
