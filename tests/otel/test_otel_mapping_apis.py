"""The mapping on spans captured from real instrumentations of the Responses API, Anthropic's
Messages API and pydantic-ai (tests/data/otel/, made by ``python -m tests.otel.capture``; see
tests/data/otel/README.md): the pure functions that read them, and each fixture's transcript."""

from __future__ import annotations

from pathlib import Path

from monitor.otel.decode import JSON, decode_request
from monitor.otel.mapping import MappingConfig, failure_of, map_spans
from monitor.otel.messages import answer_of, input_messages, output_messages
from monitor.otel.spans import Span
from tests.otel.test_otel_conformance_spans import by_conversation

DATA = Path(__file__).resolve().parent.parent / "data" / "otel"
SYSTEM = ("system", "You are the support agent of Acme. Use tools to look orders up.")
LOOK = ("call_look_1", "lookup_order", '{"order": "A-17"}')
SHIP = ("call_ship_1", "shipping_status", '{"order": "A-17"}')
LOOKED = '{"tool": "lookup_order", "order": "A-17", "status": "shipped"}'
SHIPPED = '{"tool": "shipping_status", "order": "A-17", "status": "shipped"}'


def spans(name: str) -> list[Span]:
    return decode_request((DATA / name).read_bytes(), JSON)


def transcript(name: str) -> list[tuple[object, ...]]:
    mapped = map_spans(spans(name), MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    (only,) = by_conversation(mapped).values()
    return only


def llm_spans(found: list[Span]) -> list[Span]:
    return sorted(
        (s for s in found if s.attr("openinference.span.kind") == "LLM" or "chat" in s.name),
        key=lambda s: s.start_unix_nano,
    )


def test_a_responses_call_answers_in_one_message_of_all_its_output_items():
    """OpenInference renders each Responses output item (two function calls) as its own
    assistant message: the call gave one answer with both calls."""
    first = llm_spans(spans("responses_openinference_parallel_tools.json"))[0]
    outputs = output_messages(first)
    assert [len(m.tool_calls) for m in outputs] == [1, 1]
    answer = answer_of(first, outputs)
    assert answer is not None
    assert [(c.id, c.name) for c in answer.tool_calls] == [LOOK[:2], SHIP[:2]]
    # not a Responses API call (no ``response`` object): the first choice only, as before
    plain = Span(first.trace_id, first.span_id, "", "chat", 1, 2, attributes={})
    assert answer_of(plain, outputs) == outputs[0]


def test_the_responses_transcript_has_both_parallel_calls_in_one_answer():
    assert transcript("responses_openinference_parallel_tools.json") == [
        SYSTEM,
        ("user", "Status and shipping of A-17?"),
        ("assistant", None, (LOOK, SHIP), "support-model", (20, 9)),
        ("tool_result", "call_look_1", "lookup_order", True, LOOKED, None),
        ("tool_result", "call_ship_1", "shipping_status", True, SHIPPED, None),
        ("assistant", "A-17 shipped; it arrives Friday.", (), "support-model", (12, 5)),
    ]


def test_anthropic_tool_results_in_a_user_message_are_tool_messages():
    """Traceloop's anthropic instrumentation (GenAI 1.37 attributes): the results of two
    parallel calls come back as two ``tool_call_response`` parts of one ``user`` message;
    they are two tool messages with their call ids, and no user turn."""
    second = llm_spans(spans("anthropic_openllmetry_parallel_tools.json"))[1]
    prompt = input_messages(second)
    assert [(m.role, m.tool_call_id) for m in prompt] == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_look_1"),
        ("tool", "call_ship_1"),
    ]
    assert [m.content for m in prompt[2:]] == [LOOKED, SHIPPED]
    assert transcript("anthropic_openllmetry_parallel_tools.json")[1:3] == [
        ("user", "Status and shipping of A-17?"),
        ("assistant", None, (LOOK, SHIP), "support-model", (20, 9)),
    ]


def test_an_anthropic_status_error_keeps_its_http_status():
    """The ``anthropic`` client's error message starts with the status ("500 upstream ...")."""
    failed = next(
        s for s in spans("anthropic_openinference_provider_500.json") if s.status_code == 2
    )
    found = failure_of(failed)
    assert found is not None
    assert (found.error_type, found.http_status) == ("InternalServerError", 500)
    assert transcript("anthropic_openinference_provider_500.json")[:4] == [
        SYSTEM,
        ("user", "Where is my order A-17?"),
        ("llm_error", "InternalServerError", 500),
        ("assistant", None, (LOOK,), "support-model", (20, 9)),
    ]


def test_pydantic_ai_failed_call_takes_its_prompt_from_the_agent_span():
    """pydantic-ai records a call's messages only with its response: the failed call's span
    has none; the agent span's system instructions and ``pydantic_ai.all_messages`` give the
    system prompt and the user turn, before the error (status from ``status_code: 500``)."""
    found = spans("pydantic_ai_provider_500.json")
    chat = next(s for s in found if s.attr("gen_ai.operation.name") == "chat")
    assert input_messages(chat) == []
    assert transcript("pydantic_ai_provider_500.json") == [
        SYSTEM,
        ("user", "Where is my order A-17?"),
        ("llm_error", "ModelServerError", 500),
    ]
