"""A small tool-using support agent, instrumented by the real libraries, with its ground truth.

The agent is an ordinary loop around the official ``openai.AsyncOpenAI`` client: system prompt +
user turn -> chat completion -> run the tools the model asked for -> chat completion again, until
the model answers in text. It keeps the whole history (each call gets the cumulative history, as
real agents do) and records, as the ground truth the monitor must reproduce, every message it
sent or received, every tool call and result and every LLM call that failed.

Two flavours wrap the same loop:

- ``genai``: ``opentelemetry-instrumentation-openai-v2`` on the client, the agent as a GenAI
  ``invoke_agent`` span and the tools as ``execute_tool`` spans made by
  ``opentelemetry-util-genai``'s ``TelemetryHandler`` (the conversation id is set on the agent
  invocation, so only the root span names it, and it ends last);
- ``openinference``: ``openinference-instrumentation-openai`` on the client, the agent as an
  OpenInference ``AGENT`` span (input.value / output.value repeating the user turn and the final
  answer), tools as ``TOOL`` spans, the conversation as ``using_session``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import openai
from openai import AsyncOpenAI
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

from tests.otel.provider import Action, Answer, Call, Fail, Provider

SYSTEM = "You are the support agent of Acme. Use tools to look orders up."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {"type": "object", "properties": {"order": {"type": "string"}}},
        },
    }
    for name in ("lookup_order", "refund_order", "shipping_status")
]


@dataclass(frozen=True)
class Case:
    """One conversation: the user turns, and the provider's script for its HTTP requests."""

    name: str
    turns: tuple[str, ...]
    script: tuple[Action, ...]
    stream: bool = False
    client_retries: int = 0  # the openai client's own retries (invisible to the spans)
    agent_retries: int = 0  # the agent retries a failed call itself (a new span each)
    failing_tools: frozenset[str] = frozenset()


@dataclass
class Truth:
    """What the agent really sent and received, in order (the ground truth)."""

    conversation_id: str
    model: str
    entries: list[tuple[Any, ...]] = field(default_factory=list)


def _answer(text: str, rid: str, p: int = 12, c: int = 5) -> Answer:
    return Answer(text, (), p, c, rid)


def _calls(rid: str, *calls: Call, p: int = 20, c: int = 9) -> Answer:
    return Answer(None, calls, p, c, rid)


def cases() -> list[Case]:
    """Every case of the conformance table (the same for each instrumentation)."""
    look = Call("call_look_1", "lookup_order", {"order": "A-17"})
    ship = Call("call_ship_1", "shipping_status", {"order": "A-17"})
    refund = Call("call_refund_1", "refund_order", {"order": "A-17"})
    return [
        Case(
            "plain",
            ("What are your opening hours?",),
            (_answer("We are open 9 to 5, Monday to Friday.", "r-plain"),),
        ),
        Case(
            "tool_loop",
            ("Where is my order A-17?",),
            (_calls("r-t1", look), _answer("Order A-17 has shipped.", "r-t2")),
        ),
        Case(
            "parallel_tools",
            ("Status and shipping of A-17?",),
            (_calls("r-p1", look, ship), _answer("A-17 shipped; it arrives Friday.", "r-p2")),
        ),
        Case(
            "failing_tool",
            ("Refund order A-17 please.",),
            (
                _calls("r-f1", refund),
                _answer("I could not refund A-17: the refund service failed.", "r-f2"),
            ),
            failing_tools=frozenset({"refund_order"}),
        ),
        Case(
            "provider_500",
            ("Where is my order A-17?",),
            (
                Fail(500, "upstream overloaded"),
                _calls("r-5a", look),
                _answer("Order A-17 has shipped.", "r-5b"),
            ),
            agent_retries=1,
        ),
        Case(
            "rate_limit_429_client_retry",
            ("Where is my order A-17?",),
            (
                Fail(429, "slow down", {"Retry-After": "0"}),
                _calls("r-4a", look),
                _answer("Order A-17 has shipped.", "r-4b"),
            ),
            client_retries=2,
        ),
        Case(
            "rate_limit_429_exhausted",
            ("Where is my order A-17?",),
            (
                Fail(429, "slow down", {"Retry-After": "0"}),
                Fail(429, "slow down", {"Retry-After": "0"}),
            ),
            client_retries=1,
        ),
        Case(
            "streaming",
            ("Where is my order A-17?",),
            (_calls("r-s1", look), _answer("Order A-17 has shipped, arriving soon.", "r-s2")),
            stream=True,
        ),
        Case(
            "multi_turn_repeats",
            ("Hi", "Where is A-17?", "Hi"),
            (
                _answer("Hello! How can I help?", "r-m1"),
                _calls("r-m2", look),
                _answer("Order A-17 has shipped.", "r-m3"),
                _answer("Hello! How can I help?", "r-m4"),
            ),
        ),
    ]


def run_tool(name: str, arguments: dict[str, Any], failing: frozenset[str]) -> str:
    if name in failing:
        raise RuntimeError(f"{name}: service unavailable")
    return json.dumps({"tool": name, "order": arguments.get("order"), "status": "shipped"})


class _SomeText:
    """Equal to any non-empty string (an error whose wording is the SDK's own)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "<some text>"


SOME_TEXT = _SomeText()


class _Anything:
    """Equal to anything (what an instrumentation does not record, e.g. an error's type)."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "<anything>"


ANYTHING = _Anything()

ToolSpan = Callable[[Call, str | None, str | None], Any]


async def converse(
    client: AsyncOpenAI,
    case: Case,
    truth: Truth,
    tool_span: Callable[[Call], Any],
) -> str | None:
    """The agent loop; returns the final answer (None when it gave up)."""
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    truth.entries.append(("system", SYSTEM))
    final: str | None = None
    for turn in case.turns:
        history.append({"role": "user", "content": turn})
        truth.entries.append(("user", turn))
        while True:
            message = None
            for _attempt in range(case.agent_retries + 1):
                try:
                    message, usage, model = await _call(client, case, history)
                    break
                except openai.APIStatusError as exc:
                    truth.entries.append(("llm_error", type(exc).__name__, exc.status_code))
            if message is None:
                return None
            calls = [
                (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in message.get("tool_calls") or []
            ]
            truth.entries.append(
                (
                    "assistant",
                    message.get("content"),
                    tuple((i, n, json.dumps(a, sort_keys=True)) for i, n, a in calls),
                    model,
                    usage,
                )
            )
            history.append(message)
            if not calls:
                final = message.get("content")
                break
            for call_id, name, arguments in calls:
                call = Call(call_id, name, arguments)
                with tool_span(call) as record:
                    try:
                        result = run_tool(name, arguments, case.failing_tools)
                        ok, error = True, None
                    except RuntimeError as exc:
                        result, ok, error = f"error: {exc}", False, str(exc)
                        record(None, exc)
                    else:
                        record(result, None)
                truth.entries.append(
                    ("tool_result", call_id, name, ok, result if ok else None, error)
                )
                history.append({"role": "tool", "tool_call_id": call_id, "content": result})
    return final


async def _call(
    client: AsyncOpenAI, case: Case, history: list[dict[str, Any]]
) -> tuple[dict[str, Any], tuple[int, int], str]:
    if not case.stream:
        r = await client.chat.completions.create(
            model="support-model",
            messages=history,
            tools=TOOLS,  # type: ignore[arg-type]
        )
        msg = r.choices[0].message.model_dump(exclude_none=True)
        assert r.usage is not None
        return msg, (r.usage.prompt_tokens, r.usage.completion_tokens), r.model
    stream = await client.chat.completions.create(
        model="support-model",
        messages=history,
        tools=TOOLS,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    text = ""
    calls: dict[int, dict[str, Any]] = {}
    usage = (0, 0)
    model = "support-model"
    async for chunk in stream:
        model = chunk.model
        if chunk.usage is not None:
            usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(
                    tc.index,
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if tc.id:
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    slot["function"]["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    slot["function"]["arguments"] += tc.function.arguments
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message, usage, model


async def run_genai(provider: Provider, provider_tp: TracerProvider, case: Case, cid: str) -> Truth:
    """One conversation with openai-v2 instrumentation and util-genai agent/tool spans."""
    from opentelemetry.util.genai.handler import TelemetryHandler
    from opentelemetry.util.genai.types import Error

    handler = TelemetryHandler(tracer_provider=provider_tp)
    truth = Truth(cid, "support-model")
    provider.script.clear()
    provider.push(*case.script)
    client = AsyncOpenAI(base_url=provider.base_url, api_key="k", max_retries=case.client_retries)

    @contextmanager
    def tool_span(call: Call) -> Iterator[Callable[[str | None, Exception | None], None]]:
        with handler.tool(call.name, tool_call_id=call.id) as inv:
            inv.arguments = call.arguments

            def record(result: str | None, exc: Exception | None) -> None:
                if exc is not None:
                    inv.fail(Error(message=str(exc), type=type(exc)))
                else:
                    inv.tool_result = result

            yield record

    agent = handler.invoke_local_agent(agent_name="support-bot", request_model="support-model")
    agent.conversation_id = cid
    final = await converse(client, case, truth, tool_span)
    if final is not None:
        from opentelemetry.util.genai.types import OutputMessage, Text

        agent.output_messages = [OutputMessage("assistant", [Text(final)], "stop")]
    agent.stop()
    await client.close()
    return truth


async def run_openinference(
    provider: Provider, provider_tp: TracerProvider, case: Case, cid: str
) -> Truth:
    """One conversation with OpenInference's OpenAI instrumentation, AGENT and TOOL spans."""
    from openinference.instrumentation import using_session

    tracer = provider_tp.get_tracer("support-agent")
    truth = Truth(cid, "support-model")
    provider.script.clear()
    provider.push(*case.script)
    client = AsyncOpenAI(base_url=provider.base_url, api_key="k", max_retries=case.client_retries)

    @contextmanager
    def tool_span(call: Call) -> Iterator[Callable[[str | None, Exception | None], None]]:
        with tracer.start_as_current_span(
            call.name,
            attributes={
                "openinference.span.kind": "TOOL",
                "tool.name": call.name,
                "tool_call.id": call.id,
                "tool.parameters": json.dumps(call.arguments),
                "input.value": json.dumps(call.arguments),
            },
        ) as span:

            def record(result: str | None, exc: Exception | None) -> None:
                if exc is not None:
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                else:
                    span.set_attribute("output.value", result or "")

            yield record

    with (
        using_session(cid),
        tracer.start_as_current_span(
            "support-bot",
            attributes={
                "openinference.span.kind": "AGENT",
                "agent.name": "support-bot",
                "input.value": case.turns[0],
            },
        ) as root,
    ):
        final = await converse(client, case, truth, tool_span)
        if final is not None:
            root.set_attribute("output.value", final)
    await client.close()
    return truth


def _agents_tool(name: str, failing: frozenset[str]) -> Any:
    from agents import function_tool

    def tool(order: str) -> str:
        return run_tool(name, {"order": order}, failing)

    tool.__doc__ = f"{name} tool"
    return function_tool(tool, name_override=name)


async def run_agents(
    provider: Provider, provider_tp: TracerProvider, case: Case, cid: str
) -> Truth:
    """One conversation run by the OpenAI Agents SDK (chat completions model, function tools,
    one ``Runner.run`` per user turn: a trace per turn) under ``using_session``, instrumented
    by ``openinference-instrumentation-openai-agents``. The truth is read from the wire: what
    the SDK sent (each request's new messages) and received (the scripted answers)."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner
    from openinference.instrumentation import using_session

    provider.script.clear()
    provider.push(*case.script)
    start = len(provider.requests)
    client = AsyncOpenAI(base_url=provider.base_url, api_key="k", max_retries=case.client_retries)
    names = [t["function"]["name"] for t in TOOLS]
    agent = Agent(
        name="support-bot",
        instructions=SYSTEM,
        tools=[_agents_tool(n, case.failing_tools) for n in names],
        model=OpenAIChatCompletionsModel(model="support-model", openai_client=client),
    )
    history: list[Any] = []
    with using_session(cid):
        for turn in case.turns:
            said = [*history, {"role": "user", "content": turn}]
            try:
                if case.stream:
                    streamed = Runner.run_streamed(agent, said)
                    async for _ in streamed.stream_events():
                        pass
                    history = streamed.to_input_list()
                else:
                    history = (await Runner.run(agent, said)).to_input_list()
            except openai.APIStatusError:
                break  # the SDK gives up on a failed model call: the conversation ends
    await client.close()
    truth = Truth(cid, "support-model")
    actions = iter(case.script)
    seen = 0
    call_names: dict[str, str] = {}
    requests = provider.requests[start:]
    for n, body in enumerate(requests):
        action = next(actions)
        messages = body["messages"]
        if isinstance(action, Fail):
            if n + 1 < len(requests):
                continue  # retried by the client: inside one span, as the agent saw nothing
            for m in messages[seen:]:
                if m["role"] in ("system", "user"):
                    truth.entries.append((m["role"], m["content"]))
            truth.entries.append(("llm_error", ANYTHING, action.status))
            break
        for m in messages[seen:]:
            if m["role"] in ("system", "user"):
                truth.entries.append((m["role"], m["content"]))
            elif m["role"] == "tool":
                name = call_names[m["tool_call_id"]]
                ok = name not in case.failing_tools
                text = m["content"]
                error = None if ok else SOME_TEXT  # the SDK's (redacted) error, not on the wire
                truth.entries.append(("tool_result", m["tool_call_id"], name, ok, text, error))
        answer = action
        calls = tuple((c.id, c.name, json.dumps(c.arguments, sort_keys=True)) for c in answer.calls)
        call_names.update((c.id, c.name) for c in answer.calls)
        usage: tuple[int | None, int | None] = (answer.prompt_tokens, answer.completion_tokens)
        if body.get("stream") and not (body.get("stream_options") or {}).get("include_usage"):
            usage = (None, None)  # the provider sent no usage
        truth.entries.append(("assistant", answer.content, calls, "support-model", usage))
        seen = len(messages) + 1
    return truth
