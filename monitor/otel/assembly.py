"""Trace assembly across export requests (pure): which spans can be mapped now, which wait.

An OpenTelemetry SDK exports spans as they end, in batches: one trace often arrives in several
requests, and its root (in GenAI the only span naming the conversation and the agent) ends, so
arrives, last. A trace is mapped whole, once its local root is known: a span with no parent or
whose parent is in another process (OTLP ``SPAN_FLAGS_CONTEXT_IS_REMOTE``). ``plan`` decides,
for the spans of one request, the spans waiting for their trace (``pending``) and what is known
of traces resolved before (``resolved``):

- a trace whose root is now known (in the request or waiting) is ready: all its spans are
  mapped together and the trace is settled ``root`` (its conversation and agent remembered);
  a trace with an agent span and no LLM span yet waits for them a grace period (then the
  sweep maps it as it is, ``root``): mapped without them its agent span would give the answer
  they give; with ``wait_for_content``, a trace with an LLM span that carries no content and
  that no GenAI log record answers for yet waits for those records the same way
  (:func:`monitor.otel.log_events.awaits_content`);
- spans of a trace resolved before (late spans: a child ending after its root) are mapped at
  once with the remembered conversation and agent (``late``);
- the other spans wait (``park``).

Traces that only wait (in ``pending``, none of their spans in the request) are planned the same
way: after parking, the caller plans what waits for the parked traces again, so that two
requests of one trace handled at once, each parking before it looks again, cannot both leave
the trace waiting.

``expire`` maps what waited past the deadline (or beyond the count bound) as it is: a trace
resolved meanwhile gets its remembered context (``late``), else the fallback: the conversation
and agent the spans name, else the trace id as the conversation (``deadline``/``overflow``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from monitor.otel.context import CONVERSATION_ATTRIBUTES, kind_of, named_agent, named_once
from monitor.otel.log_events import LogEvent, awaits_content
from monitor.otel.spans import Span

Records = Mapping[tuple[str, str], list[LogEvent]]  # GenAI log records by (trace, span)


@dataclass(frozen=True)
class TraceContext:
    """What a resolved trace named: its conversation and agent (None when not exactly one),
    and whether it had LLM calls (then a late agent span is not the only witness of its turn:
    mapped alone it would repeat the answer its LLM spans gave)."""

    conversation_id: str | None
    agent_id: str | None
    llm_calls: bool = False

    @staticmethod
    def of(spans: list[Span]) -> TraceContext:
        return TraceContext(
            named_once(spans, CONVERSATION_ATTRIBUTES),
            named_agent(spans),
            any(kind_of(s) == "llm" for s in spans),
        )


@dataclass
class Plan:
    """``ready``: spans to map now; ``contexts``: remembered context of late spans' traces;
    ``park``: spans to store as pending; ``settle``: traces resolved now -> (how, context)."""

    ready: list[Span] = field(default_factory=list)
    contexts: dict[str, TraceContext] = field(default_factory=dict)
    park: list[Span] = field(default_factory=list)
    settle: dict[str, tuple[str, TraceContext]] = field(default_factory=dict)


def plan(
    spans: list[Span],
    pending: dict[str, list[Span]],
    resolved: dict[str, TraceContext],
    records: Records | None = None,
    wait_for_content: bool = False,
) -> Plan:
    """What to do with the spans of one request (see the module docstring); ``records``: the
    GenAI log records known for the traces (waiting and in the request)."""
    out = Plan()
    traces: dict[str, dict[str, Span]] = {}
    for span in spans:
        if span.well_formed is not None:  # the mapping rejects it with its reason
            out.ready.append(span)
            continue
        traces.setdefault(span.trace_id, {})[span.span_id] = span
    for trace_id in [*traces, *(t for t in pending if t not in traces)]:
        new = traces.get(trace_id, {})
        waiting = {s.span_id: s for s in pending.get(trace_id, [])}
        whole = {**waiting, **new}
        if trace_id in resolved:
            out.ready.extend(whole.values())
            out.contexts[trace_id] = resolved[trace_id]
            if waiting:
                out.settle[trace_id] = ("late", resolved[trace_id])
        elif waiting_for(list(whole.values()), records or {}, wait_for_content) is None:
            out.ready.extend(whole.values())
            out.settle[trace_id] = ("root", TraceContext.of(list(whole.values())))
        else:
            out.park.extend(s for s in new.values() if s.span_id not in waiting)
    return out


def expire(due: dict[str, list[Span]], resolved: dict[str, TraceContext], how: str) -> Plan:
    """Map traces that waited long enough (``how``: ``root`` past the grace period,
    ``deadline`` or ``overflow``)."""
    out = Plan()
    for trace_id, spans in due.items():
        out.ready.extend(spans)
        if trace_id in resolved:
            out.contexts[trace_id] = resolved[trace_id]
            out.settle[trace_id] = ("late", resolved[trace_id])
        else:
            out.settle[trace_id] = (how, TraceContext.of(spans))
    return out


def waiting_for(spans: list[Span], records: Records, wait_for_content: bool) -> str | None:
    """What the spans of one trace wait for, None when the trace can be mapped: ``root`` (the
    local root is not known), ``witness`` (an agent span and no LLM span: it would be the only
    witness of the turn, its input and output as the messages, so it waits a grace period,
    ``PendingLimits.grace_s``, for LLM spans overtaken by the root, a retried or concurrent
    export), ``content`` (with ``wait_for_content``: an LLM span without content whose GenAI log
    records have not come, ``PendingLimits.content_wait_s``)."""
    if not any(s.is_local_root for s in spans):
        return "root"
    kinds = {kind_of(s) for s in spans}
    if "llm" not in kinds and "agent" in kinds:
        return "witness"
    if wait_for_content and awaits_content(spans, records):
        return "content"
    return None
