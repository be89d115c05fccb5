"""Agent frameworks with their own OpenTelemetry instrumentation, for the conformance suite:
pydantic-ai (``Agent(..., instrument=InstrumentationSettings(...))``: its built-in GenAI spans)
over the loopback OpenAI-compatible provider, and the OpenAI Agents SDK with a tool-using
sub-agent used as a tool (``agent.as_tool``).

The frameworks run their own loop, so the truth is read from the wire (``wire_truth``): what
the framework sent (each request's new messages) and what the provider answered (the script).
"""

from __future__ import annotations

import json
from typing import Any

import openai
from opentelemetry.sdk.trace import TracerProvider

from tests.otel.provider import Answer, Call, Fail, Provider
from tests.otel.support_agent import ANYTHING, SYSTEM, TOOLS, Case, Truth, cases, run_tool

# the support cases pydantic-ai plays: a tool that raises ends its run (no failing_tool; its
# way to fail a tool is ModelRetry: TOOL_RETRY), and the loopback provider streams chat
# completions only through the openai client's SSE (covered)
PYDANTIC_AI_CASES = (
    "plain",
    "tool_loop",
    "parallel_tools",
    "provider_500",
    "rate_limit_429_client_retry",
    "rate_limit_429_exhausted",
    "multi_turn_repeats",
)
# pydantic-ai's failing tool: under pydantic-ai a tool of ``failing_tools`` raises ``ModelRetry``
# on its first call (the model is told, and asks again; the second call succeeds)
RETRY_MESSAGE = "the refund service is busy, try again"
TOOL_RETRY = Case(
    "tool_retry",
    ("Refund order A-17 please.",),
    (
        Answer(None, (Call("call_refund_1", "refund_order", {"order": "A-17"}),), 20, 9, "r-y1"),
        Answer(None, (Call("call_refund_2", "refund_order", {"order": "A-17"}),), 24, 9, "r-y2"),
        Answer("Order A-17 is refunded.", (), 30, 6, "r-y3"),
    ),
    failing_tools=frozenset({"refund_order"}),
)


def pydantic_ai_cases() -> list[Case]:
    """The cases pydantic-ai plays: :data:`PYDANTIC_AI_CASES` and :data:`TOOL_RETRY`."""
    return [c for c in cases() if c.name in PYDANTIC_AI_CASES] + [TOOL_RETRY]


def wire_truth(
    provider: Provider,
    start: int,
    case: Case,
    cid: str,
    model: str = "support-model",
    retried: dict[str, str] | None = None,
) -> Truth:
    """The truth of a framework's conversation from the provider's requests since ``start``:
    every request's new system, user and tool messages, then the scripted answer; a failed
    request the client retried is not seen by the agent; the last one failing is an error.
    ``retried``: the calls whose tool asked the model to retry (call id -> the reason): their
    tool message (the retry prompt) is a failed result with that error, and the reason as its
    content (the tool's output its span records: what the tool gave back)."""
    retried = retried or {}
    truth = Truth(cid, model)
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
            elif m["role"] == "tool" and m["tool_call_id"] in retried:
                call_id = m["tool_call_id"]
                name = call_names[call_id]
                reason = retried[call_id]
                truth.entries.append(("tool_result", call_id, name, False, reason, reason))
            elif m["role"] == "tool":
                name = call_names[m["tool_call_id"]]
                truth.entries.append(
                    ("tool_result", m["tool_call_id"], name, True, m["content"], None)
                )
        calls = tuple((c.id, c.name, json.dumps(c.arguments, sort_keys=True)) for c in action.calls)
        call_names.update((c.id, c.name) for c in action.calls)
        usage = (action.prompt_tokens, action.completion_tokens)
        truth.entries.append(("assistant", action.content, calls, model, usage))
        seen = len(messages) + 1
    return truth


async def run_pydantic_ai(provider: Provider, tp: TracerProvider, case: Case, cid: str) -> Truth:
    """One conversation run by a pydantic-ai ``Agent`` (OpenAI chat model on the loopback
    provider, function tools, one ``run`` per user turn with the message history and the
    conversation id), instrumented by pydantic-ai itself (``InstrumentationSettings`` on
    ``tp``: ``invoke_agent`` > ``chat`` / ``execute_tool`` spans)."""
    from pydantic_ai import Agent, ModelRetry, RunContext
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider.script.clear()
    provider.push(*case.script)
    start = len(provider.requests)
    client = openai.AsyncOpenAI(
        base_url=provider.base_url, api_key="k", max_retries=case.client_retries
    )
    model = OpenAIChatModel("support-model", provider=OpenAIProvider(openai_client=client))
    agent: Agent[None, str] = Agent(
        model,
        name="support-bot",
        instructions=SYSTEM,
        retries=0,
    )
    # (2.78's Agent takes no ``instrument`` argument: the property)
    agent.instrument = InstrumentationSettings(tracer_provider=tp)
    retried: dict[str, str] = {}  # call id -> the reason the tool asked for a retry
    for t in TOOLS:
        name = t["function"]["name"]

        def tool(ctx: RunContext[None], order: str, name: str = name) -> str:
            if name in case.failing_tools and ctx.retry == 0:
                retried[str(ctx.tool_call_id)] = RETRY_MESSAGE
                raise ModelRetry(RETRY_MESSAGE)
            return run_tool(name, {"order": order}, frozenset())

        tool.__doc__ = f"{name} tool"
        # the annotations as objects: this module's are strings, and RunContext is imported here
        tool.__annotations__ = {"ctx": RunContext[None], "order": str, "name": str, "return": str}
        agent.tool(name=name, retries=1)(tool)
    history: list[Any] = []
    for turn in case.turns:
        try:
            result = await agent.run(turn, message_history=history, conversation_id=cid)
        except Exception as exc:  # the model call failed: pydantic-ai ends the run
            if "status_code" not in dir(exc) and not isinstance(exc, openai.APIStatusError):
                raise
            break
        history = result.all_messages()
    await client.close()
    return wire_truth(provider, start, case, cid, retried=retried)


async def run_sub_agent_as_tool(
    provider: Provider, tp: TracerProvider, cid: str
) -> list[tuple[str, tuple[Any, ...]]]:
    """The OpenAI Agents SDK (chat completions model) under
    ``openinference-instrumentation-openai-agents``: a ``support`` agent whose tool
    ``ask_orders`` is an ``orders`` agent (``as_tool``) that itself calls ``lookup_order``,
    one ``Runner.run`` under ``using_session(cid)`` (install the instrumentor on ``tp`` first).
    The truth, read from the wire, as (agent, entry): each model request's new system, user and
    tool messages and the scripted answer, under the agent that made the request."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openinference.instrumentation import using_session

    from tests.otel.provider import Answer, Call

    @function_tool
    def lookup_order(order: str) -> str:
        """lookup_order tool"""
        return run_tool("lookup_order", {"order": order}, frozenset())

    client = openai.AsyncOpenAI(base_url=provider.base_url, api_key="k", max_retries=0)
    model = OpenAIChatCompletionsModel(model="support-model", openai_client=client)
    orders = Agent(
        name="orders", instructions="You look orders up.", tools=[lookup_order], model=model
    )
    support = Agent(
        name="support",
        instructions=SYSTEM,
        tools=[orders.as_tool(tool_name="ask_orders", tool_description="Ask the orders agent")],
        model=model,
    )
    script = (
        Answer(None, (Call("call_ask", "ask_orders", {"input": "Where is A-17?"}),), 10, 2, "s1"),
        Answer(None, (Call("call_look", "lookup_order", {"order": "A-17"}),), 20, 4, "o1"),
        Answer("A-17 has shipped.", (), 30, 6, "o2"),
        Answer("Your order A-17 has shipped.", (), 40, 8, "s2"),
    )
    provider.script.clear()
    provider.push(*script)
    start = len(provider.requests)
    with using_session(cid):
        result = await Runner.run(support, "Where is my order A-17?")
    await client.close()
    assert result.final_output == "Your order A-17 has shipped."
    truth: list[tuple[str, tuple[Any, ...]]] = []
    seen: dict[str, int] = {}  # agent -> messages of its last request, plus its answer
    names = {"call_ask": "ask_orders", "call_look": "lookup_order"}
    for body, answer in zip(provider.requests[start:], script, strict=True):
        messages = body["messages"]
        agent = "support" if messages[0]["content"] == SYSTEM else "orders"
        for m in messages[seen.get(agent, 0) :]:
            if m["role"] in ("system", "user"):
                truth.append((agent, (m["role"], m["content"])))
            elif m["role"] == "tool":
                call = m["tool_call_id"]
                truth.append((agent, ("tool_result", call, names[call], True, m["content"], None)))
        calls = tuple((c.id, c.name, json.dumps(c.arguments, sort_keys=True)) for c in answer.calls)
        usage = (answer.prompt_tokens, answer.completion_tokens)
        truth.append((agent, ("assistant", answer.content, calls, "support-model", usage)))
        seen[agent] = len(messages) + 1
    return truth
