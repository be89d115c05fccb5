"""Conformance of a LangGraph graph (two model-calling nodes and a tool node, tests/otel/
graph_agent.py) under OpenInference's and OpenLLMetry's (Traceloop's) LangChain
instrumentations: every support-agent case, through the official OTLP encoders and the
monitor's decoder and mapping, and end to end over OTLP/HTTP and OTLP/gRPC with the official
exporters to the real worker (Kafka, Postgres), a trace split over several requests and sent
twice. Per conversation the stored transcript must equal what the graph sent and received on
the wire, every message under the graph's one agent. The captured spans in tests/data/otel/
pin the LangChain value shapes the mapping reads."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as json_spans
from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonExporter
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.otel.context import SpanContext, agent_of
from monitor.otel.decode import JSON, PROTOBUF, decode_request
from monitor.otel.langchain import messages_in, tool_message_in
from monitor.otel.mapping import MappingConfig, map_spans
from monitor.otel.spans import Span
from tests.otel.conformance import instrumented, transcript
from tests.otel.graph_agent import (
    GRAPH,
    GRAPH_FLAVORS,
    NODES,
    SHAPES,
    instrumented_graph,
    play_graph,
)
from tests.otel.support_agent import Truth, cases
from tests.otel.test_otel_conformance import TOKEN, metric, start_worker, stored
from tests.servers.worker import WorkerProcess, count, create_topic, wait_for_count

DATA = Path(__file__).resolve().parent.parent / "data" / "otel"


def agent_id(flavor: str) -> str:
    """The agent every message of the flavor's graph gets: OpenLLMetry names the compiled
    graph on its workflow span; OpenInference names no agent (its LangGraph node spans named
    "agent" are AGENT spans without ``agent.name``): the resource's service."""
    return GRAPH if flavor == "langgraph_traceloop" else f"{flavor}-svc"


def in_call_order(entries: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The results of one batch of parallel tool calls in the order of the calls. LangGraph's
    ``ToolNode`` runs a batch concurrently: each result is stored at its tool span's end, in
    the order the tools finished, which the wire (results listed in call order) does not
    tell."""
    out = list(entries)
    for i, entry in enumerate(out):
        if entry[0] != "assistant" or len(entry[2]) < 2:
            continue
        order = [call[0] for call in entry[2]]
        j = i + 1
        while j < len(out) and out[j][0] == "tool_result" and out[j][1] in order:
            j += 1
        out[i + 1 : j] = sorted(out[i + 1 : j], key=lambda r: order.index(r[1]))
    return out


def assert_same(truths: dict[str, Truth], got: dict[str, list[dict[str, Any]]]) -> None:
    assert set(got) == set(truths)
    for cid, truth in truths.items():
        assert in_call_order(transcript(got[cid])) == in_call_order(truth.entries), cid


def provider_for(flavor: str) -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": f"{flavor}-svc"}))
    tp.add_span_processor(SimpleSpanProcessor(memory))
    return tp, memory


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("flavor", GRAPH_FLAVORS)
@pytest.mark.parametrize("encoding", [PROTOBUF, JSON])
async def test_every_case_reconstructed_exactly(flavor: str, encoding: str, shape: str):
    """Every case, the support agent's nodes in the graph or (``react``) the prebuilt
    ``create_react_agent`` as a sub-graph node after the triage node."""
    tp, memory = provider_for(flavor)
    with instrumented_graph(flavor, tp):
        truths = await play_graph(cases(), flavor, shape)
    finished = list(memory.get_finished_spans())
    if encoding == PROTOBUF:
        body = encode_spans(finished).SerializeToString()
    else:
        body = str(json_spans(finished).to_json()).encode()
    mapped = map_spans(decode_request(body, encoding), MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for e in mapped.events:
        by_conv.setdefault(e.conversation_id, []).append(json.loads(e.to_json()))
    assert_same(truths, by_conv)
    for cid in truths:
        assert {e["agent"]["id"] for e in by_conv[cid]} == {agent_id(flavor)}, cid
    # a trace per user turn: the multi-turn conversation's three traces
    multi = {e.attributes["otel.trace_id"] for e in mapped.events if "multi" in e.conversation_id}
    assert len(multi) == 3
    tool_errors = sum(
        e[0] == "tool_result" and e[3] is False for t in truths.values() for e in t.entries
    )
    llm_errors = sum(e[0] == "llm_error" for t in truths.values() for e in t.entries)
    assert mapped.failures == {"tool": tool_errors, "llm_call": llm_errors}


# each flavor's switch for content capture off (OpenInference's TraceConfig from the
# environment: hidden values written as ``__REDACTED__``; OpenLLMetry: no content attributes)
CONTENT_OFF = {
    "langgraph_oi": {"OPENINFERENCE_HIDE_INPUTS": "true", "OPENINFERENCE_HIDE_OUTPUTS": "true"},
    "langgraph_traceloop": {"TRACELOOP_TRACE_CONTENT": "false"},
}


def blind(entries: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """What may be stored of a conversation recorded without content: each model call's
    answer with no text and no calls (its model and tokens), each tool's result with no
    content (its name, ok, the exception's message), each failed call; no system prompt, no
    user message. The call id a tool result was stored under is the monitor's (``?`` here)."""
    out: list[tuple[Any, ...]] = []
    for e in entries:
        if e[0] == "assistant":
            out.append(("assistant", None, (), e[3], e[4]))
        elif e[0] == "tool_result":
            out.append(("tool_result", "?", e[2], e[3], None, e[5]))
        elif e[0] == "llm_error":
            out.append(e)
    return out


def by_name(entries: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Each run of consecutive tool results in tool name order: with no call ids recorded the
    results of parallel calls cannot be put in call order (:func:`in_call_order`), and the
    order they finished in is a race."""
    out: list[tuple[Any, ...]] = []
    run: list[tuple[Any, ...]] = []
    for e in [*entries, ("end",)]:
        if e[0] == "tool_result":
            run.append(e)
            continue
        out.extend(sorted(run, key=lambda r: str(r[2])))
        run = []
        out.append(e)
    return out[:-1]


def assert_blind(truths: dict[str, Truth], got: dict[str, list[dict[str, Any]]]) -> None:
    """``got`` is :func:`blind` of each truth; a tool result's call id is no wire id (none was
    recorded to pair it with) and no stored message has a text."""
    assert set(got) == set(truths)
    wire_ids = {
        c[0] for t in truths.values() for e in t.entries if e[0] == "assistant" for c in e[2]
    }
    for cid, truth in truths.items():
        stored_entries = transcript(got[cid])
        ids = {e[1] for e in stored_entries if e[0] == "tool_result"}
        assert not ids & wire_ids, cid
        anonymous = [
            ("tool_result", "?", *e[2:]) if e[0] == "tool_result" else e for e in stored_entries
        ]
        assert by_name(anonymous) == by_name(blind(truth.entries)), cid
        assert all(not (e.get("message") or {}).get("content") for e in got[cid]), cid


@pytest.mark.parametrize("flavor", GRAPH_FLAVORS)
async def test_content_off_stores_the_structure_and_no_text(
    flavor: str, monkeypatch: pytest.MonkeyPatch
):
    """Content capture off: what is stored is what the spans say, and no more: OpenInference's
    ``__REDACTED__`` placeholders are no text (no user message, no answer made of them)."""
    for name, value in CONTENT_OFF[flavor].items():
        monkeypatch.setenv(name, value)
    tp, memory = provider_for(flavor)
    with instrumented_graph(flavor, tp):
        truths = await play_graph(cases(), f"{flavor}-off")
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    mapped = map_spans(decode_request(body, PROTOBUF), MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for e in mapped.events:
        by_conv.setdefault(e.conversation_id, []).append(json.loads(e.to_json()))
    assert_blind(truths, by_conv)
    for cid in truths:
        assert {e["agent"]["id"] for e in by_conv[cid]} == {agent_id(flavor)}, cid


CLIENT_ERRORS = {"OpenAIAPIError": "InternalServerError", "OpenAIRateLimitError": "RateLimitError"}


async def test_openllmetry_and_openai_v2_on_the_client_each_call_stored_once(
    monkeypatch: pytest.MonkeyPatch,
):
    """OpenLLMetry's LangChain instrumentation and openai-v2 on the client at once: two LLM
    spans per model call, siblings (openai-v2 does not read OpenLLMetry's suppression key), the
    client's within the other's time with the same answer. One assistant message per call: the
    client's span speaks, so a failure's type is the ``openai`` client's exception, not
    langchain-openai's wrapper."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    flavor = "langgraph_traceloop"
    tp, memory = provider_for(flavor)
    with instrumented_graph(flavor, tp), instrumented("genai", tp):
        truths = await play_graph(cases(), flavor)
    spans = list(memory.get_finished_spans())
    chats = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    calls = sum(e[0] in ("assistant", "llm_error") for t in truths.values() for e in t.entries)
    assert len(chats) == 2 * calls  # each call described twice
    names = {s.context.span_id: s.name for s in spans}
    # siblings: both under the node's task span, neither inside the other
    assert all(s.parent and names[s.parent.span_id].startswith("execute_task") for s in chats)
    body = encode_spans(spans).SerializeToString()
    mapped = map_spans(decode_request(body, PROTOBUF), MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for e in mapped.events:
        by_conv.setdefault(e.conversation_id, []).append(json.loads(e.to_json()))
    for truth in truths.values():
        truth.entries = [
            ("llm_error", CLIENT_ERRORS[e[1]], e[2]) if e[0] == "llm_error" else e
            for e in truth.entries
        ]
    assert_same(truths, by_conv)


def with_client_errors(truths: dict[str, Truth]) -> dict[str, Truth]:
    """The truths with each failure's type the ``openai`` client's (:data:`CLIENT_ERRORS`):
    with the client instrumented too, its span is the one closest to the wire (rule 1)."""
    for truth in truths.values():
        truth.entries = [
            ("llm_error", CLIENT_ERRORS[e[1]], e[2]) if e[0] == "llm_error" else e
            for e in truth.entries
        ]
    return truths


async def play_doubled(tp: TracerProvider, shape: str, prefix: str) -> dict[str, Truth]:
    """Every case under OpenInference's LangChain and openai instrumentors at once, each turn
    in the application's own span (OpenInference's LangChain callbacks never make their spans
    current: without a span of the application's, each client call is a trace of its own)."""
    tracer = tp.get_tracer("support-app")
    with instrumented_graph("langgraph_oi", tp), instrumented("openinference", tp):
        truths = await play_graph(
            cases(), prefix, shape, lambda: tracer.start_as_current_span("handle-turn")
        )
    return with_client_errors(truths)


@pytest.mark.parametrize("shape", SHAPES)
async def test_openinference_langchain_and_openai_each_call_stored_once(shape: str):
    """OpenInference's LangChain and openai instrumentors together: two LLM spans per model
    call, the LangChain one under the node, the client's under the application's span (not
    nested, not siblings), the client's within the other's time with the same answer: one
    assistant message per call, the node's agent span adds nothing (rule 1, rule 5)."""
    flavor = "langgraph_oi"
    tp, memory = provider_for(flavor)
    truths = await play_doubled(tp, shape, f"{flavor}-doubled")
    spans = list(memory.get_finished_spans())
    llm = [s for s in spans if (s.attributes or {}).get("openinference.span.kind") == "LLM"]
    calls = sum(e[0] in ("assistant", "llm_error") for t in truths.values() for e in t.entries)
    assert len(llm) == 2 * calls  # each call described twice
    assert len({s.context.trace_id for s in spans if s.name == "handle-turn"}) == len(
        {s.context.trace_id for s in llm}
    )  # every LLM span in its turn's trace
    body = encode_spans(spans).SerializeToString()
    mapped = map_spans(decode_request(body, PROTOBUF), MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for e in mapped.events:
        by_conv.setdefault(e.conversation_id, []).append(json.loads(e.to_json()))
    assert_same(truths, by_conv)


@pytest.mark.parametrize("transport", ["http/json", "grpc"])
async def test_openinference_langchain_and_openai_stored_once_over_http_and_grpc(
    worker: WorkerProcess, database_url: str, transport: str
):
    """The doubled spans (both shapes) through the real worker, batches of 2 spans."""
    flavor = "langgraph_oi"
    tp, _ = provider_for(flavor)
    tp.add_span_processor(
        BatchSpanProcessor(
            exporter(worker, transport), max_export_batch_size=2, schedule_delay_millis=50
        )
    )
    truths: dict[str, Truth] = {}
    for shape in SHAPES:
        truths |= await play_doubled(tp, shape, f"doubled-{shape}")
    assert await asyncio.to_thread(tp.force_flush, 30_000)
    want = sum(len(t.entries) for t in truths.values())
    assert await wait_for_count(database_url, want, stable_s=1.5) == want
    assert_same(truths, await stored(database_url))
    await asyncio.to_thread(tp.shutdown)


@pytest.fixture
async def worker(
    broker: Any, topic_name: str, database_url: str, tmp_path: Path
) -> AsyncIterator[WorkerProcess]:
    await create_topic(broker.bootstrap, topic_name)
    w = start_worker(broker, database_url, topic_name, tmp_path)
    try:
        await w.wait_ready()
        yield w
    finally:
        w.stop()


def exporter(worker: WorkerProcess, transport: str) -> SpanExporter:
    if transport == "grpc":
        return GrpcExporter(
            worker.grpc_target,
            insecure=True,
            headers=(("authorization", f"Bearer {TOKEN}"),),
            compression=grpc.Compression.Gzip,
        )
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if transport == "http/protobuf":
        return OTLPSpanExporter(
            f"{worker.url}/v1/traces", headers=headers, compression=Compression.Gzip
        )
    return JsonExporter(f"{worker.url}/v1/traces", headers=headers)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("flavor", "transport"),
    [
        ("langgraph_oi", "http/json"),
        ("langgraph_oi", "grpc"),
        ("langgraph_traceloop", "http/protobuf"),
        ("langgraph_traceloop", "grpc"),
    ],
)
async def test_every_conversation_stored_exactly_over_http_and_grpc(
    worker: WorkerProcess, database_url: str, flavor: str, transport: str, shape: str
):
    """The official exporter in batches of 2 spans (each trace over several requests, in the
    order its spans end), then the whole set once more (an exporter's retry): stored once;
    both graph shapes (the ``react`` one: a prebuilt agent as a sub-graph)."""
    await stored_over(worker, database_url, flavor, transport, content=True, shape=shape)


@pytest.mark.parametrize(
    ("flavor", "transport"),
    [
        ("langgraph_oi", "http/json"),
        ("langgraph_oi", "grpc"),
        ("langgraph_traceloop", "http/protobuf"),
        ("langgraph_traceloop", "grpc"),
    ],
)
async def test_content_off_stored_over_http_and_grpc(
    worker: WorkerProcess,
    database_url: str,
    flavor: str,
    transport: str,
    monkeypatch: pytest.MonkeyPatch,
):
    """Content capture off, end to end: the structure only (the traces wait for content
    records that never come, ``MONITOR_OTEL_CONTENT_WAIT_SECONDS``, then are mapped)."""
    for name, value in CONTENT_OFF[flavor].items():
        monkeypatch.setenv(name, value)
    await stored_over(worker, database_url, flavor, transport, content=False)


async def stored_over(
    worker: WorkerProcess,
    database_url: str,
    flavor: str,
    transport: str,
    content: bool,
    shape: str = NODES,
) -> None:
    """Every case through ``transport`` to the worker, then sent again; stored exactly (or,
    without ``content``, :func:`blind`), once, every message under the graph's agent."""
    check = assert_same if content else assert_blind
    tp, memory = provider_for(flavor)
    tp.add_span_processor(
        BatchSpanProcessor(
            exporter(worker, transport), max_export_batch_size=2, schedule_delay_millis=50
        )
    )
    with instrumented_graph(flavor, tp):
        truths = await play_graph(cases(), flavor, shape)
    assert await asyncio.to_thread(tp.force_flush, 30_000)
    want = sum(len(t.entries if content else blind(t.entries)) for t in truths.values())
    assert await wait_for_count(database_url, want, stable_s=1.5) == want
    got = await stored(database_url)
    check(truths, got)
    assert {e["agent"]["id"] for events in got.values() for e in events} == {agent_id(flavor)}

    again = exporter(worker, transport)
    spans = list(memory.get_finished_spans())
    assert await asyncio.to_thread(again.export, spans) == SpanExportResult.SUCCESS
    await asyncio.sleep(2.0)
    assert await count(database_url) == want
    check(truths, await stored(database_url))
    assert metric(worker, "monitor_otlp_traces_total", "how", "deadline") == 0
    await asyncio.to_thread(tp.shutdown)


# --- the captured spans (tests/data/otel/SOURCE.md) -----------------------------------------

CAPTURED_TRUTH = [  # what the graph sent and received in the captured conversation
    ("system", "Classify the customer's last message in one word: orders, refunds or other."),
    ("user", "Status and shipping of A-17?"),
    ("assistant", "orders", (), "support-model", (8, 1)),
    ("system", "You are the support agent of Acme. Use tools to look orders up."),
    (
        "assistant",
        None,
        (
            ("call_look_1", "lookup_order", '{"order": "A-17"}'),
            ("call_ship_1", "shipping_status", '{"order": "A-17"}'),
        ),
        "support-model",
        (20, 9),
    ),
    (
        "tool_result",
        "call_look_1",
        "lookup_order",
        True,
        '{"tool": "lookup_order", "order": "A-17", "status": "shipped"}',
        None,
    ),
    (
        "tool_result",
        "call_ship_1",
        "shipping_status",
        True,
        '{"tool": "shipping_status", "order": "A-17", "status": "shipped"}',
        None,
    ),
    ("assistant", "A-17 shipped; it arrives Friday.", (), "support-model", (12, 5)),
]


def captured(flavor: str) -> list[Any]:
    body = (DATA / f"{flavor}_parallel_tools.json").read_bytes()
    return decode_request(body, JSON)


@pytest.mark.parametrize("flavor", GRAPH_FLAVORS)
def test_captured_spans_map_to_the_conversation(flavor: str):
    mapped = map_spans(captured(flavor), MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    events = [json.loads(e.to_json()) for e in mapped.events]
    assert {e["conversation_id"] for e in events} == {"captured-parallel_tools"}
    assert transcript(events) == CAPTURED_TRUTH
    assert {e["agent"]["id"] for e in events} == {agent_id(flavor)}


def test_a_langchain_tool_message_is_unwrapped_to_its_content_and_call():
    """The tool spans' outputs: OpenInference's ``messages_to_dict`` form and OpenLLMetry's
    ``dumpd`` form inside its ``{"output": ...}`` envelope, both the ToolMessage the model got."""
    for flavor, key in (
        ("langgraph_oi", "output.value"),
        ("langgraph_traceloop", "gen_ai.tool.call.result"),
    ):
        tools = {s.name: s for s in captured(flavor) if key in s.attributes and "ship" in s.name}
        (span,) = tools.values()
        out = tool_message_in(span.attributes[key])
        assert out is not None, flavor
        assert out.call_id == "call_ship_1"
        assert out.content == '{"tool": "shipping_status", "order": "A-17", "status": "shipped"}'
    assert tool_message_in("plain text") is None
    assert tool_message_in('{"outputs": {"route": "orders"}}') is None


def test_a_graph_state_is_read_as_its_messages():
    """A node's or the graph's output (a LangGraph state, either form): its messages in order,
    tool calls with their ids; a state without messages, or a plain text, holds none."""
    for flavor, key in (
        ("langgraph_oi", "output.value"),
        ("langgraph_traceloop", "traceloop.entity.output"),
    ):
        roots = [s for s in captured(flavor) if s.name in (GRAPH, f"{GRAPH}.workflow")]
        (root,) = [s for s in roots if key in s.attributes]
        held = messages_in(root.attributes[key])
        assert held is not None, flavor
        assert [m.role for m in held] == ["user", "assistant", "tool", "tool", "assistant"]
        assert [c.id for c in held[1].tool_calls] == ["call_look_1", "call_ship_1"]
        assert held[1].content is None and held[2].tool_call_id == "call_look_1"
        assert held[-1].content == "A-17 shipped; it arrives Friday."
    assert messages_in('{"outputs": {"route": "orders"}, "kwargs": {}}') is None
    assert messages_in("orders") is None
    user = messages_in('{"inputs": {"messages": [["user", "Hi"]]}}')
    assert user is not None and [(m.role, m.content) for m in user] == [("user", "Hi")]


def test_openllmetry_run_id_is_not_the_agent():
    """OpenLLMetry's workflow span carries LangChain's run id (new every invocation) as
    ``gen_ai.agent.id``: the agent is the graph's name, on every span of the trace."""
    spans = captured("langgraph_traceloop")
    by_id = {s.span_id: s for s in spans}
    workflow = next(s for s in spans if s.name == f"{GRAPH}.workflow")
    assert workflow.attributes["gen_ai.agent.id"] != GRAPH
    assert agent_of(workflow) == GRAPH
    assert {SpanContext.of(s, by_id).agent_id for s in spans} == {GRAPH}


def test_concurrent_calls_beside_each_other_are_not_twins():
    """Rule 1 beside a span needs the same answer: two model calls of one node run at once, one
    within the other's time, with different answers, are two calls (both stored); with the
    same response id they are one call described twice (the inner one stored)."""

    def chat(span_id: str, start: int, end: int, text: str, rid: str) -> Span:
        output = [{"role": "assistant", "parts": [{"type": "text", "content": text}]}]
        return Span(
            trace_id="ab" * 16,
            span_id=span_id,
            parent_span_id="cd" * 8,
            name="chat m",
            start_unix_nano=start,
            end_unix_nano=end,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.conversation.id": "c",
                "gen_ai.output.messages": json.dumps(output),
                "gen_ai.response.id": rid,
            },
        )

    outer = chat("1" * 16, 1_000_000, 9_000_000, "first", "r-1")
    for inner, stored_texts in (
        (chat("2" * 16, 2_000_000, 8_000_000, "second", "r-2"), ["first", "second"]),
        (chat("2" * 16, 2_000_000, 8_000_000, "first", "r-1"), ["first"]),
    ):
        mapped = map_spans([outer, inner], MappingConfig())
        texts = [e.message.content for e in mapped.events if e.type == "message"]
        assert sorted(t for t in texts if t) == stored_texts


def test_a_failed_agent_span_beside_its_work_adds_no_second_failure():
    """Rule 6 for an agent span with nothing below it (recorded beside its work): a failed
    model call of the trace that ended within its time already says its failure; with none
    (the call ended before it began, or did not fail) the agent's failure is stored."""

    def span(span_id: str, start: int, end: int, failed: bool, **attributes: Any) -> Span:
        return Span(
            trace_id="ab" * 16,
            span_id=span_id,
            parent_span_id="cd" * 8,
            name=span_id,
            start_unix_nano=start,
            end_unix_nano=end,
            attributes={"gen_ai.conversation.id": "c", **attributes},
            status_code=2 if failed else 0,
            status_message="OpenAIAPIError: Error code: 500" if failed else "",
        )

    root = Span("ab" * 16, "cd" * 8, "", "graph", 0, 10_000_000, {"gen_ai.conversation.id": "c"})
    agent = span("1" * 16, 1_000_000, 9_000_000, True, **{"gen_ai.operation.name": "invoke_agent"})
    for chat_start, chat_end, chat_failed, agent_errors in (
        (2_000_000, 8_000_000, True, 0),  # failed within its time: said once, by the call
        (100, 500_000, True, 1),  # failed before the agent began: not its failure
        (2_000_000, 8_000_000, False, 1),  # the call did not fail: the agent's own failure
    ):
        chat = span(
            "2" * 16, chat_start, chat_end, chat_failed, **{"gen_ai.operation.name": "chat"}
        )
        mapped = map_spans([root, agent, chat], MappingConfig())
        names = [e.tool_result.name for e in mapped.events if e.type == "tool_result"]
        assert names.count("agent") == agent_errors, (chat_start, chat_failed)
        assert names.count("llm") == int(chat_failed)
