"""Trace assembly across export requests on a real Postgres: waiting spans, the root arriving
last, first, after a restart (a new store over the same database), the deadline and the count
bound. Spans come from the real openai-v2 / util-genai instrumentation of the support agent."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.contract.events import AgentEvent
from monitor.otel.assembly import TraceContext, plan
from monitor.otel.decode import PROTOBUF, decode_request
from monitor.otel.decode_logs import decode_logs
from monitor.otel.log_events import LogEvent, by_span
from monitor.otel.mapping import MappingConfig, map_spans
from monitor.otel.pending import PendingLimits, PendingTraces
from monitor.otel.spans import Span
from monitor.otel.sweeper import sweep_once
from monitor.otel.traces import TraceAssembler, joined
from monitor.store.engine import make_engine
from tests.otel.conformance import instrumented, play
from tests.otel.support_agent import cases


class Clock:
    def __init__(self) -> None:
        self.at = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.at


@pytest.fixture
async def genai_spans(monkeypatch: pytest.MonkeyPatch) -> list[Span]:
    """Two conversations (tool loop, failing tool) as the monitor decodes them."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    memory = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    chosen = [c for c in cases() if c.name in ("tool_loop", "failing_tool")]
    with instrumented("genai", tp):
        await play("genai", tp, chosen, "as")
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    return decode_request(body, PROTOBUF)


def dump(events: list[AgentEvent]) -> list[dict[str, Any]]:
    return sorted((json.loads(e.to_json()) for e in events), key=lambda e: e["event_id"])


def store(url: str, clock: Clock, **limits: Any) -> PendingTraces:
    return PendingTraces(make_engine(url, pool_size=1), PendingLimits(**limits), clock)


async def send(
    assembler: TraceAssembler, spans: list[Span], records: list[LogEvent] | None = None
) -> list[AgentEvent]:
    """What one export request publishes (as the receivers: ``handle``)."""
    published: list[AgentEvent] = []

    async def publish(events: list[AgentEvent]) -> None:
        published.extend(events)

    await assembler.handle(spans, publish, None, records or [])
    return published


async def test_split_trace_in_any_order_and_across_a_restart_equals_the_whole(
    database_url: str, genai_spans: list[Span]
):
    config, clock = MappingConfig(), Clock()
    whole = dump(map_spans(genai_spans, config).events)
    roots = [s for s in genai_spans if s.is_local_root]
    children = [s for s in genai_spans if not s.is_local_root]
    assert len(roots) == 2 and len(children) >= 6
    first_root, second_root = roots
    trace_a, trace_b = first_root.trace_id, second_root.trace_id

    a = TraceAssembler(config, store(database_url, clock))
    got = await send(a, [s for s in children if s.trace_id == trace_a])  # root of A not yet
    got += await send(a, [second_root])  # B: the root first, alone: it waits for its spans
    assert got == []
    assert await a.waiting() == sum(s.trace_id == trace_a for s in children) + 1

    b = TraceAssembler(config, store(database_url, clock))  # a restarted worker
    got += await send(b, [first_root])
    got += await send(b, [s for s in children if s.trace_id == trace_b][::-1])
    assert dump(got) == whole
    assert await b.waiting() == 0
    assert {e.conversation_id for e in got} == {"as-tool_loop", "as-failing_tool"}

    # the root's request again (an exporter retry), alone: its LLM calls spoke, it adds nothing
    again = await send(b, [first_root])
    assert {e.event_id for e in again} <= {e["event_id"] for e in whole}
    assert not any(e.event_id.endswith(":answer") for e in again)
    # a span of A after its root (an exporter retry): mapped with A's remembered conversation
    late = await send(b, [children[0]])
    assert {e.conversation_id for e in late} <= {"as-tool_loop", "as-failing_tool"}
    assert {e.event_id for e in late} <= {e["event_id"] for e in whole}


async def test_deadline_and_count_bound_map_under_the_trace_id(
    database_url: str, genai_spans: list[Span]
):
    config, clock = MappingConfig(), Clock()
    children = [s for s in genai_spans if not s.is_local_root]
    pending = store(database_url, clock, deadline_s=60, max_spans=1000)
    assembler = TraceAssembler(config, pending)
    assert await send(assembler, children) == []
    published: list[AgentEvent] = []

    async def publish(events: list[AgentEvent]) -> None:
        published.extend(events)

    clock.at += timedelta(seconds=59)
    assert await sweep_once(assembler, publish) == {}
    clock.at += timedelta(seconds=2)
    assert await sweep_once(assembler, publish) == {"deadline": 2}
    # GenAI names the conversation on the root only: the fallback is the trace id
    assert {e.conversation_id for e in published} == {s.trace_id for s in children}
    assert sum(e.type == "tool_result" and not e.tool_result.ok for e in published) == 1
    assert await assembler.waiting() == 0

    # the bound: with at most 3 waiting, the trace waiting longest goes first
    bounded = TraceAssembler(config, store(database_url, clock, max_spans=3))
    trace_a = [s for s in children if s.trace_id == children[0].trace_id]
    trace_b = [s for s in children if s.trace_id != children[0].trace_id]
    await send(bounded, [replace(s, trace_id="a" * 32) for s in trace_a])
    clock.at += timedelta(seconds=1)
    await send(bounded, [replace(s, trace_id="b" * 32) for s in trace_b])
    published.clear()
    assert await sweep_once(bounded, publish) == {"overflow": 1}
    assert {e.conversation_id for e in published} == {"a" * 32}
    assert await bounded.waiting() == len(trace_b)


def test_plan_is_pure_and_keeps_a_lone_agent_root_waiting():
    root = Span(
        "c" * 32,
        "1" * 16,
        "",
        "invoke_agent x",
        1,
        9,
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "k"},
    )
    chat = Span("c" * 32, "2" * 16, "1" * 16, "chat", 2, 3, {"gen_ai.operation.name": "chat"})
    assert plan([root], {}, {}).park == [root]
    ready = plan([chat], {"c" * 32: [root]}, {})
    assert sorted(s.span_id for s in ready.ready) == ["1" * 16, "2" * 16]
    assert ready.settle == {"c" * 32: ("root", TraceContext("k", None, llm_calls=True))}
    late = plan([chat], {}, {"c" * 32: TraceContext("k", "bot")})
    assert late.ready == [chat] and late.contexts == {"c" * 32: TraceContext("k", "bot")}


async def test_two_requests_of_one_trace_at_once_never_leave_it_waiting(
    database_url: str, genai_spans: list[Span]
):
    """The root alone and its children, handled concurrently by two stores (two workers):
    each parks, then looks again, so one of them maps the whole trace."""
    config, clock = MappingConfig(), Clock()
    whole = dump(map_spans(genai_spans, config).events)
    roots = [s for s in genai_spans if s.is_local_root]
    children = [s for s in genai_spans if not s.is_local_root]
    a = TraceAssembler(config, store(database_url, clock))
    b = TraceAssembler(config, store(database_url, clock))
    for _ in range(3):  # several interleavings
        firsts = await asyncio.gather(send(a, children), send(b, roots))
        got = {e.event_id: e for batch in firsts for e in batch}
        assert dump(list(got.values())) == whole
        assert await a.waiting() == 0


async def test_root_overtaking_the_llm_spans_waits_for_them_or_the_grace_period(
    database_url: str, genai_spans: list[Span]
):
    """A root with some children but no LLM span yet (its LLM spans overtaken: a retried or
    concurrent export) waits: with them it is exact; without them, after the grace period,
    the agent span is the only witness."""
    config, clock = MappingConfig(), Clock()
    trace = [s for s in genai_spans if s.trace_id == genai_spans[0].trace_id]
    whole = dump(map_spans(trace, config).events)
    llm = [s for s in trace if s.attributes.get("gen_ai.operation.name") == "chat"]
    rest = [s for s in trace if s not in llm]
    assert llm and any(s.is_local_root for s in rest)
    a = TraceAssembler(config, store(database_url, clock, grace_s=30))
    b = TraceAssembler(config, store(database_url, clock, grace_s=30))
    firsts = await asyncio.gather(send(a, rest), send(b, llm))
    assert dump(list({e.event_id: e for x in firsts for e in x}.values())) == whole

    # an agent-only trace (no LLM span ever): mapped by the sweep once quiet for the grace
    agent_only = [replace(s, trace_id="d" * 32) for s in rest if s.is_local_root]
    assert await send(a, agent_only) == []
    published: list[AgentEvent] = []

    async def publish(events: list[AgentEvent]) -> None:
        published.extend(events)

    clock.at += timedelta(seconds=29)
    assert await sweep_once(a, publish) == {}
    clock.at += timedelta(seconds=2)
    assert await sweep_once(a, publish) == {"root": 1}
    assert [e.event_id.rsplit(":", 1)[1] for e in published if e.type == "message"] == ["answer"]


async def test_spans_parked_while_their_trace_was_mapped_are_swept_at_once(
    database_url: str, genai_spans: list[Span]
):
    """A span parked by one request while another mapped its trace (it looked before the
    other settled) is mapped by the next sweep with the trace's conversation, not at the
    deadline."""
    config, clock = MappingConfig(), Clock()
    trace = [s for s in genai_spans if s.trace_id == genai_spans[0].trace_id]
    tool = next(s for s in trace if s.attributes.get("gen_ai.operation.name") == "execute_tool")
    pending = store(database_url, clock)
    assembler = TraceAssembler(config, pending)
    await send(assembler, [s for s in trace if s is not tool])  # mapped and settled
    await pending.park([tool])  # what the other request did after looking
    published: list[AgentEvent] = []

    async def publish(events: list[AgentEvent]) -> None:
        published.extend(events)

    assert await sweep_once(assembler, publish) == {"late": 1}
    assert [(e.type, e.conversation_id) for e in published] == [("tool_result", "as-tool_loop")]
    assert await assembler.waiting() == 0


async def test_a_span_parked_while_its_trace_is_published_is_mapped_by_that_request(
    database_url: str, genai_spans: list[Span]
):
    config, clock = MappingConfig(), Clock()
    trace = [s for s in genai_spans if s.trace_id == genai_spans[0].trace_id]
    tool = next(s for s in trace if s.attributes.get("gen_ai.operation.name") == "execute_tool")
    pending = store(database_url, clock)
    assembler = TraceAssembler(config, pending)
    published: list[AgentEvent] = []

    async def publish(events: list[AgentEvent]) -> None:
        if not published:  # another request parks the tool span while this one publishes
            await pending.park([tool])
        published.extend(events)

    await assembler.handle([s for s in trace if s is not tool], publish)
    # the trace was mapped without its tool span (the result from the next call's history);
    # the tool span then gives the same call's result under the same id: stored once
    assert {e.event_id for e in published} == {e.event_id for e in map_spans(trace, config).events}
    results = [e for e in published if e.type == "tool_result"]
    assert len(results) == 2 and len({e.event_id for e in results}) == 1
    assert await assembler.waiting() == 0


async def test_waiting_spans_are_mapped_only_for_agents_their_keys_allow(
    database_url: str, genai_spans: list[Span]
):
    """Spans parked under a key for other agents are never published for theirs: not by the
    sweep after the deadline, nor by a request of a key for every agent bringing the root."""
    config, clock = MappingConfig(), Clock()
    children = [s for s in genai_spans if not s.is_local_root]
    roots = [s for s in genai_spans if s.is_local_root]
    # without their root the children map to the resource's service name
    (agent,) = {e.agent.id for e in map_spans(children, config).events}
    other_key = ("team-b-*",)
    pending = store(database_url, clock, deadline_s=60)
    assembler = TraceAssembler(config, pending)
    published: list[AgentEvent] = []

    async def publish(events: list[AgentEvent]) -> None:
        published.extend(events)

    await assembler.handle(children, publish, other_key)
    assert published == [] and await pending.scopes({s.trace_id for s in children}) == {
        s.trace_id: [other_key] for s in children
    }
    clock.at += timedelta(seconds=61)
    assert await sweep_once(assembler, publish) == {"deadline": 2}
    assert published == [] and await assembler.waiting() == 0

    # the same spans under a key naming the agent (by prefix) are mapped by the sweep
    await assembler.handle([_moved(s, "e") for s in children], publish, (agent[:7] + "*",))
    clock.at += timedelta(seconds=61)
    assert await sweep_once(assembler, publish) == {"deadline": 2}
    assert {e.agent.id for e in published} == {agent} and published

    # children parked by the stranger's key, then the root under a key for every agent:
    # the request maps the trace but keeps nothing the stranger's key does not allow
    published.clear()
    await assembler.handle([_moved(s, "f") for s in children], publish, other_key)
    prepared = await assembler.handle([_moved(s, "f") for s in roots], publish, None)
    assert published == [] and prepared.mapped.rejected > 0
    assert any("out_of_scope" in reason for reason in prepared.mapped.errors)
    assert await assembler.waiting() == 0


def _moved(span: Span, digit: str) -> Span:
    """``span`` in another trace (the first 8 hex digits of its trace id replaced)."""
    return replace(span, trace_id=digit * 8 + span.trace_id[8:])


@pytest.fixture
async def event_only(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Span], list[LogEvent]]:
    """Two conversations whose content is only in GenAI log records (openai-v2 EVENT_ONLY),
    as the monitor decodes them."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "EVENT_ONLY")
    memory, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tp, lp = TracerProvider(), LoggerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    chosen = [c for c in cases() if c.name in ("tool_loop", "failing_tool")]
    with instrumented("genai", tp, lp):
        await play("genai", tp, chosen, "ev")
    spans = decode_request(encode_spans(memory.get_finished_spans()).SerializeToString(), PROTOBUF)
    batch = decode_logs(encode_logs(logs.get_finished_logs()).SerializeToString(), PROTOBUF)
    return spans, batch.events


async def test_log_records_and_spans_joined_whichever_comes_first_or_after_the_wait(
    database_url: str, event_only: tuple[list[Span], list[LogEvent]]
):
    """Records first, or spans first (the trace waits for its records), or records split
    around a restart: the same events as spans and records in one request. A trace whose
    records never come is mapped without content once the content wait has passed."""
    spans, records = event_only
    config, clock = MappingConfig(), Clock()
    whole = dump(map_spans(joined(spans, by_span(records)), config).events)
    texts = [e for e in whole if e["type"] == "message" and e["message"].get("content")]
    assert len(texts) >= 6  # the content is there, from the records
    trace_a, trace_b = sorted({s.trace_id for s in spans})

    def of(trace: str, items: list[Any]) -> list[Any]:
        return [x for x in items if x.trace_id == trace]

    a = TraceAssembler(config, store(database_url, clock, content_wait_s=5), wait_for_content=True)
    got = await send(a, [], of(trace_a, records)[:2])  # A: part of its records first
    got += await send(a, of(trace_b, spans))  # B: every span, root included, first
    assert got == [] and await a.waiting() == len(of(trace_b, spans))
    b = TraceAssembler(config, store(database_url, clock, content_wait_s=5), wait_for_content=True)
    got += await send(b, [], of(trace_a, records)[2:])  # a restarted worker
    got += await send(b, of(trace_a, spans))
    got += await send(b, [], of(trace_b, records)[::-1])
    assert dump(list({e.event_id: e for e in got}.values())) == whole
    assert await b.waiting() == 0 and await b.waiting_records() == 0

    # records of a trace mapped already: too late, not kept
    prepared = await b.prepare([], None, of(trace_a, records))
    assert prepared.records == {"late": len(of(trace_a, records))} and not prepared.mapped.events
    assert await b.waiting_records() == 0

    # spans whose records never come: mapped by the sweep after the content wait, no text
    moved = [_moved(s, "9") for s in of(trace_a, spans)]
    assert await send(b, moved) == []
    published: list[AgentEvent] = []

    async def publish(events: list[AgentEvent]) -> None:
        published.extend(events)

    clock.at += timedelta(seconds=4)
    assert await sweep_once(b, publish) == {}
    clock.at += timedelta(seconds=2)
    assert await sweep_once(b, publish) == {"root": 1}
    assert published and not any(e.type == "message" and e.message.content for e in published)
    assert await b.waiting() == 0
