"""The conformance harness: play the support agent's cases under a real instrumentation, and
turn stored events back into the same shape as the agent's ground truth to compare them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.trace import TracerProvider

from tests.otel.api_agents import API_FLAVORS, API_GAPS, run_api
from tests.otel.framework_agents import pydantic_ai_cases, run_pydantic_ai
from tests.otel.provider import Provider
from tests.otel.support_agent import (
    Case,
    Truth,
    cases,
    run_agents,
    run_genai,
    run_openinference,
)

FLAVORS = ("genai", "openinference", "agents")
# the genai flavor with openai-v2's legacy (semconv 1.30) path: content as per-message log events
LEGACY = "genai_legacy"
# pydantic-ai's own instrumentation (tests/otel/framework_agents.py): nothing to install
PYDANTIC_AI = "pydantic_ai"
# every case: the Agents SDK runs its own loop (it does not retry a failed call itself)
AGENT_SDK_CASES = (
    "plain",
    "tool_loop",
    "parallel_tools",
    "failing_tool",
    "provider_500",
    "rate_limit_429_client_retry",
    "rate_limit_429_exhausted",
    "streaming",
    "multi_turn_repeats",
)


# the Responses and Anthropic flavors (tests/otel/api_agents.py): every case, streaming as each
# API streams (server-sent events of its own kind)
API_CASES = AGENT_SDK_CASES
# (flavor, case) that are not stored exactly for a known fault of the instrumentation, each with
# a test of its own that pins the fault (tests/otel/test_otel_conformance_apis.py): Traceloop's
# anthropic 0.62.4 adds ``message_start``'s output token count to ``message_delta``'s, which
# the API documents as cumulative (one token too many on every streamed call)
CASE_GAPS = (("anthropic_ll", "streaming"),)


def cases_for(flavor: str) -> list[Case]:
    if flavor == PYDANTIC_AI:
        return pydantic_ai_cases()
    if flavor in (*API_FLAVORS, *API_GAPS):
        return [c for c in cases() if c.name in API_CASES and (flavor, c.name) not in CASE_GAPS]
    return [c for c in cases() if flavor != "agents" or c.name in AGENT_SDK_CASES]


@contextmanager
def instrumented(
    flavor: str, tp: TracerProvider, lp: LoggerProvider | None = None
) -> Iterator[None]:
    """The flavor's OpenAI instrumentor on ``tp`` (and its log records on ``lp``) for the
    duration (set the content-capture environment before entering: the instrumentations read it
    when instrumenting)."""
    instrumentor: Any
    if flavor == PYDANTIC_AI:  # instrumented by its InstrumentationSettings on ``tp``
        yield
        return
    if flavor in (*API_FLAVORS, *API_GAPS):
        with api_instrumented(flavor, tp):
            yield
        return
    if flavor == LEGACY:
        with legacy_openai_v2(tp, lp or LoggerProvider()):
            yield
        return
    if flavor == "genai":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        instrumentor = OpenAIInstrumentor()
    elif flavor == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as OIOpenAI

        instrumentor = OIOpenAI()
    else:
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        instrumentor = OpenAIAgentsInstrumentor()
    providers: dict[str, Any] = {"tracer_provider": tp}
    if lp is not None:
        providers["logger_provider"] = lp
    instrumentor.instrument(**providers)
    try:
        yield
    finally:
        instrumentor.uninstrument()


@contextmanager
def api_instrumented(flavor: str, tp: TracerProvider) -> Iterator[None]:
    """The instrumentor of an API flavor (tests/otel/api_agents.py) on ``tp``."""
    instrumentor: Any
    if flavor == "responses":
        from openinference.instrumentation.openai import OpenAIInstrumentor as OIOpenAI

        instrumentor = OIOpenAI()
    elif flavor == "responses_ll":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as LLOpenAI

        instrumentor = LLOpenAI()
    elif flavor == "anthropic_oi":
        from openinference.instrumentation.anthropic import AnthropicInstrumentor as OIAnthropic

        instrumentor = OIAnthropic()
    else:
        from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

        instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=tp)
    try:
        yield
    finally:
        instrumentor.uninstrument()


@contextmanager
def legacy_openai_v2(tp: TracerProvider, lp: LoggerProvider) -> Iterator[None]:
    """openai-v2's own legacy wrapper of ``AsyncCompletions.create`` (semconv 1.30: content as
    ``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice`` log events, capture
    on). Installed by hand: the instrumentor chooses it only without the latest-conventions
    opt-in, which util-genai 1.1b0 (openai-v2 2.4b0 needs it) always reports as on."""
    import openai
    from opentelemetry.instrumentation.openai_v2.instruments import Instruments
    from opentelemetry.instrumentation.openai_v2.patch import async_chat_completions_create_v_old
    from opentelemetry.instrumentation.utils import unwrap
    from opentelemetry.sdk.metrics import MeterProvider
    from wrapt import wrap_function_wrapper

    name = "opentelemetry.instrumentation.openai_v2"
    wrapper = async_chat_completions_create_v_old(
        tp.get_tracer(name),
        lp.get_logger(name),
        Instruments(MeterProvider().get_meter(name)),
        True,
    )
    wrap_function_wrapper("openai.resources.chat.completions", "AsyncCompletions.create", wrapper)
    try:
        yield
    finally:
        unwrap(openai.resources.chat.completions.AsyncCompletions, "create")


async def play(flavor: str, tp: TracerProvider, cases: list[Case], prefix: str) -> dict[str, Truth]:
    """Each case once, as conversation ``<prefix>-<case name>``; the truths by conversation."""
    run = {
        "genai": run_genai,
        LEGACY: run_genai,
        "openinference": run_openinference,
        "agents": run_agents,
        PYDANTIC_AI: run_pydantic_ai,
    }.get(flavor)
    truths: dict[str, Truth] = {}
    async with Provider() as provider:
        for case in cases:
            cid = f"{prefix}-{case.name}"
            if run is None:
                truths[cid] = await run_api(flavor, provider, tp, case, cid)
            else:
                truths[cid] = await run(provider, tp, case, cid)
    return truths


def transcript(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Events of one conversation (agent-event/v1 JSON bodies) in the truth's shape, in order."""
    out: list[tuple[Any, ...]] = []
    for e in sorted(events, key=lambda e: (datetime.fromisoformat(e["ts"]), e["event_id"])):
        attrs = e.get("attributes") or {}
        if e["type"] == "message":
            m = e["message"]
            if m["role"] != "assistant":
                out.append((m["role"], m.get("content")))
                continue
            calls = tuple(
                (c["id"], c["name"], json.dumps(c["arguments"], sort_keys=True))
                for c in m.get("tool_calls") or []
            )
            tokens = (
                attrs.get("gen_ai.usage.input_tokens", attrs.get("llm.token_count.prompt")),
                attrs.get("gen_ai.usage.output_tokens", attrs.get("llm.token_count.completion")),
            )
            out.append(("assistant", m.get("content"), calls, e["agent"].get("model"), tokens))
        elif e["type"] == "tool_result":
            r = e["tool_result"]
            if r["name"] == "llm" and r["call_id"].startswith("llm:"):
                out.append(
                    ("llm_error", attrs.get("error.type"), attrs.get("http.response.status_code"))
                )
            else:
                out.append(
                    (
                        "tool_result",
                        r["call_id"],
                        r["name"],
                        r["ok"],
                        r.get("content"),
                        r.get("error"),
                    )
                )
        else:
            out.append((e["type"],))
    return out
