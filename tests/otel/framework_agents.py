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

from tests.otel.provider import Fail, Provider
from tests.otel.support_agent import ANYTHING, SYSTEM, TOOLS, Case, Truth, run_tool

# the cases pydantic-ai plays: a tool that raises ends its run (no failing_tool), and the
# loopback provider streams chat completions only through the openai client's SSE (covered)
PYDANTIC_AI_CASES = (
    "plain",
    "tool_loop",
    "parallel_tools",
    "provider_500",
    "rate_limit_429_client_retry",
    "rate_limit_429_exhausted",
    "multi_turn_repeats",
)


def wire_truth(
    provider: Provider, start: int, case: Case, cid: str, model: str = "support-model"
) -> Truth:
    """The truth of a framework's conversation from the provider's requests since ``start``:
    every request's new system, user and tool messages, then the scripted answer; a failed
    request the client retried is not seen by the agent; the last one failing is an error."""
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
    from pydantic_ai import Agent
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
    agent.instrument = InstrumentationSettings(tracer_provider=tp)  # (an init argument before 2.7x)
    for t in TOOLS:
        name = t["function"]["name"]

        def tool(order: str, name: str = name) -> str:
            return run_tool(name, {"order": order}, case.failing_tools)

        tool.__doc__ = f"{name} tool"
        agent.tool_plain(name=name)(tool)
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
    return wire_truth(provider, start, case, cid)
