"""The support agent as a LangGraph graph, instrumented by the real LangChain instrumentations.

The graph (``langgraph`` with ``langchain-openai``'s ``ChatOpenAI`` against the loopback
provider) has two model-calling nodes and a tool node, over LangGraph's ``MessagesState`` kept
by a checkpointer under ``thread_id`` = the conversation id (one ``ainvoke`` per user turn, so
one trace per turn):

- ``triage``: the model, without tools, under its own system prompt, given the whole history,
  classifies the turn (its one-word answer goes to the state's ``route``, not to the messages);
- ``agent``: the model with the support tools under the support system prompt, given the whole
  history; retried by a LangGraph ``RetryPolicy`` when the case has the agent retry a failed
  call (a new model call, as the plain support agent's loop does);
- ``tools``: LangGraph's prebuilt ``ToolNode`` (``handle_tool_errors=True``: a failing tool's
  error goes to the model as the tool message), async tools, so parallel calls finish in the
  order they were asked;

``triage -> agent -> (tools -> agent)* -> end``. The provider's script is the support agent's
case with a triage answer before each user turn (:func:`graph_script`).

The truth is read from the wire (:func:`wire_truth`): what the graph sent (each request's new
system prompts, tool results and user messages) and what the provider answered, a failure
counted only when the client gave up on it (the ``openai`` client's own retries are inside one
model call).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import openai
from langgraph.graph import MessagesState
from opentelemetry.sdk.trace import TracerProvider

from tests.otel.provider import Action, Answer, Fail, Provider
from tests.otel.support_agent import SYSTEM, TOOLS, Case, Truth, run_tool

TRIAGE = "Classify the customer's last message in one word: orders, refunds or other."
GRAPH = "support-graph"  # the compiled graph's name
# the exception the graph gets for a status the provider answered: langchain-openai's own
# subclasses of openai's RateLimitError and InternalServerError
STATUS_ERRORS = {429: "OpenAIRateLimitError", 500: "OpenAIAPIError"}
# the langchain instrumentations of the suite (flavor -> instrumentor)
GRAPH_FLAVORS = ("langgraph_oi", "langgraph_traceloop")
# the graph's shapes: ``nodes``, the support agent's nodes in the graph itself; ``react``, the
# triage node then LangGraph's prebuilt ``create_react_agent`` (its own model-calling ``agent``
# node and ``tools`` node) as a sub-graph node
NODES, REACT = "nodes", "react"
SHAPES = (NODES, REACT)
REACT_AGENT = "support-react"  # the prebuilt agent's (the sub-graph's) name


def graph_script(case: Case) -> tuple[Action, ...]:
    """The case's script with the triage node's answer before each user turn's calls."""
    out: list[Action] = []
    turn_starts = True
    n = 0
    for action in case.script:
        if turn_starts:
            n += 1
            out.append(Answer("orders", (), 8, 1, f"r-triage-{n}"))
            turn_starts = False
        out.append(action)
        if isinstance(action, Answer) and not action.calls:
            turn_starts = True
    return tuple(out)


@contextmanager
def instrumented_graph(flavor: str, tp: TracerProvider) -> Iterator[None]:
    """The flavor's LangChain instrumentor on ``tp`` for the duration."""
    instrumentor: Any
    if flavor == "langgraph_oi":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        instrumentor = LangChainInstrumentor()
    elif flavor == "langgraph_traceloop":
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        instrumentor = LangchainInstrumentor()
    else:
        raise ValueError(flavor)
    with _restored(TRACELOOP_TARGETS if flavor == "langgraph_traceloop" else ()):
        instrumentor.instrument(tracer_provider=tp)
        try:
            yield
        finally:
            instrumentor.uninstrument()


# what opentelemetry-instrumentation-langchain 0.62 wraps (module, owner.attribute): its
# uninstrument hands these to ``unwrap`` in a form ``unwrap`` does not resolve, so every wrapper,
# with its callback handler on the first tracer provider, would stay for the process
TRACELOOP_TARGETS = (
    ("langchain_core.callbacks.base", "BaseCallbackManager.__init__"),
    ("langgraph.pregel", "Pregel.stream"),
    ("langgraph.pregel", "Pregel.astream"),
    ("langgraph.types", "Command.__init__"),
    ("langgraph.prebuilt.chat_agent_executor", "create_react_agent"),
    ("langgraph.prebuilt", "create_react_agent"),
    ("langchain_openai.llms.base", "BaseOpenAI._generate"),
    ("langchain_openai.llms.base", "BaseOpenAI._agenerate"),
    ("langchain_openai.llms.base", "BaseOpenAI._stream"),
    ("langchain_openai.llms.base", "BaseOpenAI._astream"),
    ("langchain_openai.chat_models.base", "BaseChatOpenAI._generate"),
    ("langchain_openai.chat_models.base", "BaseChatOpenAI._agenerate"),
)


@contextmanager
def _restored(targets: tuple[tuple[str, str], ...]) -> Iterator[None]:
    """Puts back, on exit, what each target held on entry."""
    import importlib

    saved = []
    for module, path in targets:
        owner: Any = importlib.import_module(module)
        *outer, attr = path.split(".")
        for name in outer:
            owner = getattr(owner, name)
        held = vars(owner)[attr] if isinstance(owner, type) else getattr(owner, attr)
        saved.append((owner, attr, held))
    try:
        yield
    finally:
        for owner, attr, held in saved:
            setattr(owner, attr, held)


class State(MessagesState):
    """The graph's state: the messages, and the triage node's route."""

    route: str


def _tools(failing: frozenset[str]) -> list[Any]:
    from langchain_core.tools import StructuredTool

    def make(name: str) -> Any:
        async def tool(order: str) -> str:
            return run_tool(name, {"order": order}, failing)

        return StructuredTool.from_function(coroutine=tool, name=name, description=f"{name} tool")

    return [make(t["function"]["name"]) for t in TOOLS]


def build_graph(provider: Provider, case: Case, shape: str = NODES) -> Any:
    """The compiled graph for one conversation (its own checkpointer), of ``shape``
    (:data:`SHAPES`)."""
    from langchain_core.messages import SystemMessage
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.prebuilt import ToolNode
    from langgraph.types import RetryPolicy

    model = ChatOpenAI(
        model="support-model",
        base_url=provider.base_url,
        api_key="k",  # type: ignore[arg-type]
        max_retries=case.client_retries,
        streaming=case.stream,
        stream_usage=True,
    )
    tools = _tools(case.failing_tools)
    with_tools = model.bind_tools(tools)

    async def triage(state: State) -> dict[str, Any]:
        reply = await model.ainvoke([SystemMessage(TRIAGE), *state["messages"]])
        return {"route": reply.content}

    async def agent(state: State) -> dict[str, Any]:
        reply = await with_tools.ainvoke([SystemMessage(SYSTEM), *state["messages"]])
        return {"messages": [reply]}

    def after_agent(state: State) -> str:
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END

    retry = RetryPolicy(
        max_attempts=1 + case.agent_retries,
        initial_interval=0.01,
        jitter=False,
        retry_on=openai.APIStatusError,
    )
    builder = StateGraph(State)
    builder.add_node("triage", triage)
    if shape == REACT:  # the prebuilt agent as a sub-graph node, retried whole
        from langgraph.prebuilt import create_react_agent

        react = create_react_agent(
            model, ToolNode(tools, handle_tool_errors=True), prompt=SYSTEM, name=REACT_AGENT
        )
        builder.add_node("support", react, retry_policy=retry)
        builder.add_edge(START, "triage")
        builder.add_edge("triage", "support")
        builder.add_edge("support", END)
        return builder.compile(checkpointer=InMemorySaver(), name=GRAPH)
    builder.add_node("agent", agent, retry_policy=retry)
    builder.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    builder.add_edge(START, "triage")
    builder.add_edge("triage", "agent")
    builder.add_conditional_edges("agent", after_agent, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver(), name=GRAPH)


async def run_graph(
    provider: Provider, case: Case, cid: str, shape: str = NODES, turn_span: Any = None
) -> Truth:
    """One conversation through the graph: a turn per ``ainvoke`` under ``thread_id`` = cid;
    a model call the client and the node's retries gave up on ends the conversation."""
    script = graph_script(case)
    provider.script.clear()
    provider.push(*script)
    start = len(provider.requests)
    graph = build_graph(provider, case, shape)
    config = {"configurable": {"thread_id": cid}}
    for turn in case.turns:
        try:
            with turn_span() if turn_span is not None else nullcontext():
                await graph.ainvoke({"messages": [("user", turn)]}, config)
        except openai.APIStatusError:
            break
    return wire_truth(cid, case, script, provider.requests[start:])


def wire_truth(
    cid: str, case: Case, script: tuple[Action, ...], requests: list[dict[str, Any]]
) -> Truth:
    """What the graph sent and received, in order, from the provider's requests and script:
    per request, the system prompts not sent before, the results of calls not answered before,
    the user messages beyond those sent before, then the answer (or the failure the client
    gave up on)."""
    truth = Truth(cid, "support-model")
    systems: set[str] = set()
    answered: set[str] = set()
    users = 0
    names: dict[str, str] = {}
    attempts = 0
    for body, action in zip(requests, script, strict=False):
        messages = body["messages"]
        for m in messages:
            if m["role"] == "system" and m["content"] not in systems:
                systems.add(m["content"])
                truth.entries.append(("system", m["content"]))
        for m in messages:
            if m["role"] == "tool" and m["tool_call_id"] not in answered:
                call_id = m["tool_call_id"]
                answered.add(call_id)
                name = names[call_id]
                if name in case.failing_tools:
                    error = f"{name}: service unavailable"
                    truth.entries.append(("tool_result", call_id, name, False, None, error))
                else:
                    truth.entries.append(("tool_result", call_id, name, True, m["content"], None))
        said = [m["content"] for m in messages if m["role"] == "user"]
        truth.entries.extend(("user", text) for text in said[users:])
        users = len(said)
        if isinstance(action, Fail):
            attempts += 1
            if attempts > case.client_retries:  # the client gave up: the call failed
                truth.entries.append(("llm_error", STATUS_ERRORS[action.status], action.status))
                attempts = 0
            continue
        attempts = 0
        names.update((c.id, c.name) for c in action.calls)
        calls = tuple((c.id, c.name, json.dumps(c.arguments, sort_keys=True)) for c in action.calls)
        usage = (action.prompt_tokens, action.completion_tokens)
        truth.entries.append(("assistant", action.content, calls, "support-model", usage))
    return truth


async def play_graph(
    cases: list[Case], prefix: str, shape: str = NODES, turn_span: Any = None
) -> dict[str, Truth]:
    """Each case once through the graph of ``shape``, as conversation ``<prefix>-<case name>``
    (instrument first); the truths by conversation. ``turn_span``: a context manager factory
    each turn's ``ainvoke`` runs in (the application's own span around the graph)."""
    truths: dict[str, Truth] = {}
    async with Provider() as provider:
        for case in cases:
            cid = f"{prefix}-{case.name}"
            truths[cid] = await run_graph(provider, case, cid, shape, turn_span)
    return truths


async def capture(flavor: str, case_name: str) -> str:
    """One conversation's spans under the flavor's instrumentation, as the OTLP/HTTP JSON
    exporter posts them (the fixtures of tests/data/otel/)."""
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.otel.support_agent import cases

    memory = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": f"{flavor}-svc"}))
    tp.add_span_processor(SimpleSpanProcessor(memory))
    with instrumented_graph(flavor, tp):
        await play_graph([c for c in cases() if c.name == case_name], "captured")
    return str(encode_spans(memory.get_finished_spans()).to_json())


if __name__ == "__main__":  # re-capture the fixtures: python -m tests.otel.graph_agent
    import asyncio
    from pathlib import Path

    data = Path(__file__).resolve().parent.parent / "data" / "otel"
    data.mkdir(exist_ok=True)
    for flavor in GRAPH_FLAVORS:
        body = asyncio.run(capture(flavor, "parallel_tools"))
        text = json.dumps(json.loads(body), indent=1, sort_keys=True) + "\n"
        (data / f"{flavor}_parallel_tools.json").write_text(text)
