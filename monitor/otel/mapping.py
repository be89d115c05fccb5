"""OTLP spans -> agent-event/v1 events: the transcript of each trace (pure; docs/otel.md).

Implements OpenTelemetry GenAI semantic conventions v1.37 (``gen_ai.*``; the 1.26 content
events and OpenLLMetry's flattened ``gen_ai.prompt.N``/``gen_ai.completion.N`` are read too)
and OpenInference semantic conventions 0.1.x (``openinference.span.kind``, ``llm.*``, ``tool.*``).

``map_spans`` maps whole traces: the spans of one trace must be given together (the assembly in
``monitor.otel.assembly`` waits for a trace's root before mapping it). Per trace, the rules of
docs/otel.md "Transcript reconstruction":

1. an LLM span that has an LLM span below it is a wrapper of the same call: only the innermost
   one speaks;
2. an LLM call gives its assistant message (text, tool calls, model, token usage) from its
   output, or, when it failed, an error (a ``tool_result`` named ``llm`` with ``ok: false``)
   and no assistant message;
3. from an LLM call's input only what is new is taken: the system prompt once per conversation
   and text (``gen_ai.system_instructions`` and ``system`` messages alike), the user messages
   after the last assistant or tool message (a cumulative history repeats the earlier ones),
   and not at all when an earlier call of the trace had the same turn: the same user texts
   after as many earlier messages (a retry, or a second call on the same turn); the same text
   later in a longer history is a new turn; tool results given as ``tool`` messages only when
   no tool span has that call id and the call was asked in this trace;
4. a tool span gives the tool result of its call id (else of the earliest unanswered call of
   that tool name, else of the one unanswered call an LLM span beside it asked for: a
   framework's handoff span is named otherwise than the call); a failed tool span gives
   ``ok: false`` and the error; a tool span that succeeded takes as content the ``tool``
   message answering its call id in a later call's input (what the model was given), else
   its own result;
5. an agent span that has LLM calls below it adds no message (its input and output
   repeat its children's) and no usage (its usage is the sum of its children's); its
   confidence goes to the last assistant message below it; but when that message has no text
   (the last call asked for tools, or failed) and the agent span has an output, that output
   is the agent's own answer (``...:answer``, with the confidence); when no LLM call below carries
   content (capture off), the outermost agent's input is the user message and its output the
   text of the last answer that has neither text nor tool calls; without LLM calls below it,
   it is the only witness and gives the user message and the answer (``...:answer``);
6. an agent span that failed with no failed span below it gives an error (``agent``).

Event ids are deterministic (``monitor.otel.build``), so re-exporting or re-mapping a trace is
idempotent downstream. A span giving no event is counted in ``dropped``; a span that is
malformed or whose events fail validation in ``rejected`` with the first reasons in ``errors``.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any

from monitor.contract.events import AgentEvent, validate_event
from monitor.core.errors import InvalidEvent
from monitor.otel.assembly import TraceContext
from monitor.otel.build import (
    as_bool,
    as_float,
    call_event_id,
    clip,
    event,
    system_event_id,
    text,
    usage,
)
from monitor.otel.context import (
    CONVERSATION_ATTRIBUTES,
    SpanContext,
    kind_of,
    named_agent,
    named_once,
)
from monitor.otel.langchain import agent_messages, tool_message_in
from monitor.otel.messages import (
    Message,
    answer_of,
    input_messages,
    output_messages,
    system_instructions,
)
from monitor.otel.spans import STATUS_ERROR, Span

LLM_ERROR_TOOL = "llm"
AGENT_ERROR_TOOL = "agent"
US = 1000  # one microsecond in nanoseconds: the store's time resolution
_HTTP_STATUS = re.compile(r"\b(?:Error code|status(?:[ _]code)?)[:= ]+(\d{3})\b", re.IGNORECASE)
# an error message that starts with the HTTP status (the ``anthropic`` client's: "500 ...")
_LEADING_STATUS = re.compile(r"([45]\d{2}) [A-Za-z]")


@dataclass(frozen=True)
class MappingConfig:
    """Which attributes carry what no convention standardises (docs/otel.md, "Configuration").

    ``escalation_tools`` are fnmatch patterns on tool names; ``escalation_attributes`` are span
    attributes whose truthy value means the span escalated (a string value is the reason).
    """

    confidence_attributes: tuple[str, ...] = ("monitor.confidence",)
    escalation_tools: tuple[str, ...] = ("transfer_to_human_agents", "escalate*")
    escalation_attributes: tuple[str, ...] = ("monitor.escalation",)
    outcome_prefix: str = "monitor.outcome"

    def is_escalation_tool(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.escalation_tools)


@dataclass
class Mapped:
    """The result for a set of traces: valid events, span counts by fate, errors by kind."""

    events: list[AgentEvent] = field(default_factory=list)
    spans: int = 0
    mapped: int = 0
    dropped: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)  # llm_call / tool / agent

    def reject(self, reason: str) -> None:
        self.rejected += 1
        if len(self.errors) < 5:
            self.errors.append(reason)

    def add(self, other: Mapped) -> None:
        self.events.extend(other.events)
        self.spans += other.spans
        self.mapped += other.mapped
        self.dropped += other.dropped
        self.rejected += other.rejected
        self.errors.extend(other.errors[: max(0, 5 - len(self.errors))])
        for kind, n in other.failures.items():
            self.failures[kind] = self.failures.get(kind, 0) + n


@dataclass(frozen=True)
class Failure:
    """Why a span failed: the error text stored, its HTTP status and type when known."""

    error: str
    error_type: str | None
    http_status: int | None


def failure_of(span: Span) -> Failure | None:
    """None unless the span failed (status ERROR, or ``error.type`` set, per the conventions)."""
    exc = next((e for e in span.events if e.name == "exception"), None)
    exc_attrs = exc.attributes if exc is not None else {}
    raw_type = span.attr("error.type") or exc_attrs.get("exception.type")
    if span.status_code != STATUS_ERROR and raw_type is None:
        return None
    error_type = None
    if raw_type is not None:
        cleaned = str(raw_type).removeprefix("<class '").removesuffix("'>")
        error_type = cleaned.rsplit(".", 1)[-1]
    # the exception's own message before the status description (LangChain's run error
    # appends the traceback to it)
    message = str(exc_attrs.get("exception.message") or "") or span.status_message or "error"
    status = span.attr("http.response.status_code", "http.status_code")
    if status is None and (found := _HTTP_STATUS.search(message) or _LEADING_STATUS.match(message)):
        status = found.group(1)
    error = message
    if (
        error_type
        and not message.startswith(error_type)
        and span.attr("gen_ai.tool.name", "tool.name") is None
    ):
        error = f"{error_type}: {message}"
    http = int(status) if isinstance(status, (int, str)) and str(status).isdigit() else None
    return Failure(error, error_type, http)


def map_spans(
    spans: list[Span],
    config: MappingConfig,
    contexts: dict[str, TraceContext] | None = None,
) -> Mapped:
    """Map spans given as whole traces (see the module contract); ``contexts`` gives the
    conversation and agent of traces whose naming spans were mapped before (late spans)."""
    out = Mapped(spans=len(spans))
    traces: dict[str, dict[str, Span]] = {}
    for span in spans:
        reason = span.well_formed
        if reason is not None:
            out.reject(reason)
            continue
        trace = traces.setdefault(span.trace_id, {})
        if span.span_id in trace:  # the same span twice (a re-sent export): once
            out.dropped += 1
            continue
        trace[span.span_id] = span
    for trace_id, by_id in traces.items():
        _Trace(by_id, config, out, (contexts or {}).get(trace_id)).map()
    unique: dict[str, AgentEvent] = {}
    for e in out.events:  # one event per id (the first), as the store keeps it
        unique.setdefault(e.event_id, e)
    out.events = list(unique.values())
    return out


class _Trace:
    """The walk over one trace (rules 1-6 of the module docstring)."""

    def __init__(
        self,
        by_id: dict[str, Span],
        config: MappingConfig,
        out: Mapped,
        known: TraceContext | None,
    ) -> None:
        self.by_id = by_id
        self.config = config
        self.out = out
        spans = list(by_id.values())
        # what ``TraceContext.of`` names (its LLM calls are ``has_llm`` below)
        named_conversation = named_once(spans, CONVERSATION_ATTRIBUTES)
        self.conversation = named_conversation or (known.conversation_id if known else None)
        self.agent = named_agent(spans) or (known.agent_id if known else None)
        self.known_llm = known is not None and known.llm_calls  # mapped before, with LLM calls
        self.children: dict[str, list[Span]] = {}
        for s in spans:
            self.children.setdefault(s.parent_span_id, []).append(s)
        self.kinds = {s.span_id: kind_of(s) for s in spans}
        self.has_llm = "llm" in self.kinds.values()
        self.wraps_llm = {  # spans with an LLM span below them
            a.span_id for s in spans if self.kinds[s.span_id] == "llm" for a in self._ancestors(s)
        }
        # rule 1 for spans not nested: outer twin -> the inner one that speaks for it
        self.twin_of = _outer_twins(spans, self.kinds)
        self.wraps_llm |= set(self.twin_of)
        self.tool_span_calls = {
            str(c) for s in spans if self.kinds[s.span_id] == "tool" and (c := _call_id(s))
        }
        # per conversation: emitted call ids (asked, answered), the user turns taken
        self.asked: dict[str, list[tuple[str, str]]] = {}
        self.answered: set[str] = set()
        self.systems: set[str] = set()  # system prompt event ids given
        self.with_content: set[str] = set()  # LLM spans that carry messages
        self.turns: set[tuple[str, int, tuple[str, ...]]] = set()  # user turns taken
        self.last_assistant: dict[str, tuple[int, dict[str, Any]]] = {}  # ancestor -> event
        self._results: dict[str, str | None] | None = None  # call id -> tool message content
        self.asked_by: dict[str, list[tuple[str, str]]] = {}  # LLM span -> its calls
        self._contexts: dict[str, SpanContext] = {}  # span id -> its context (immutable)
        self._inputs: dict[str, list[Message]] = {}  # LLM span id -> its input messages
        self._answers: dict[str, Message | None] = {}  # agent span id -> its own answer

    def ctx(self, span: Span) -> SpanContext:
        """The span's context, worked out once per span (it depends on the trace only)."""
        found = self._contexts.get(span.span_id)
        if found is None:
            found = SpanContext.of(span, self.by_id, self.conversation, self.agent)
            self._contexts[span.span_id] = found
        return found

    def _input(self, span: Span) -> list[Message]:
        """The LLM span's input messages, parsed once per span (``_llm`` and ``_told`` read
        them; the list is not changed)."""
        found = self._inputs.get(span.span_id)
        if found is None:
            found = self._inputs[span.span_id] = input_messages(span)
        return found

    def _own_answer(self, span: Span) -> Message | None:
        """:func:`_own_answer` of the agent span, parsed once per span (``_said``, ``_answer``
        and ``_content_off`` read it)."""
        if span.span_id not in self._answers:
            self._answers[span.span_id] = _own_answer(span)
        return self._answers[span.span_id]

    def below(self, span: Span) -> list[Span]:
        found: list[Span] = []
        stack = list(self.children.get(span.span_id, []))
        seen = {span.span_id}
        while stack:
            s = stack.pop()
            if s.span_id in seen:
                continue
            seen.add(s.span_id)
            found.append(s)
            stack.extend(self.children.get(s.span_id, []))
        return found

    def map(self) -> None:
        ordered = sorted(self.by_id.values(), key=lambda s: (s.start_unix_nano, s.span_id))
        per_span: dict[str, list[dict[str, Any]]] = {}
        bad: dict[str, InvalidEvent] = {}
        for span in ordered:  # in start order: LLM inputs and outputs, tools
            kind = self.kinds[span.span_id]
            per_span[span.span_id] = []
            try:
                if kind == "llm" and span.span_id not in self.wraps_llm:
                    per_span[span.span_id] = self._llm(span)
                elif kind == "tool":
                    per_span[span.span_id] = self._tool(span)
            except InvalidEvent as exc:
                bad[span.span_id] = exc
        for span in ordered:  # containers last: they point at what their children gave
            try:
                if self.kinds[span.span_id] == "agent":
                    per_span[span.span_id].extend(self._agent(span))
                per_span[span.span_id].extend(self._marks(span))
            except InvalidEvent as exc:
                bad.setdefault(span.span_id, exc)
        for span in ordered:
            dicts = per_span[span.span_id]
            try:
                if span.span_id in bad:
                    raise bad[span.span_id]
                events = [validate_event(d) for d in dicts]
            except InvalidEvent as exc:
                field_ = f" ({exc.field})" if exc.field else ""
                self.out.reject(f"span {span.span_id}: {exc.reason}{field_}: {exc.detail}")
                continue
            if events:
                self.out.mapped += 1
                self.out.events.extend(events)
            else:
                self.out.dropped += 1

    # --- rule 2, 3: an LLM call -------------------------------------------------------------

    def _llm(self, span: Span) -> list[dict[str, Any]]:
        ctx = self.ctx(span)
        conv = ctx.conversation_id
        events: list[dict[str, Any]] = []
        prompt = self._input(span)
        if prompt:
            self.with_content.add(span.span_id)
        systems = [
            t
            for t in system_instructions(span, prompt)
            if system_event_id(conv, t) not in self.systems
        ]
        self.systems.update(system_event_id(conv, t) for t in systems)
        news = _new_user_messages(prompt)
        turn = (
            conv,
            sum(m.role != "system" for m in prompt) - len(news),
            tuple(m.content or "" for m in news),
        )
        if turn in self.turns:  # a retry, or a second call on the same turn
            news = []
        self.turns.add(turn)
        results = [
            m
            for m in prompt
            if m.role == "tool"
            and m.tool_call_id
            and m.tool_call_id not in self.tool_span_calls
            and m.tool_call_id not in self.answered
            and any(i == m.tool_call_id for i, _ in self.asked.get(conv, []))
        ]
        stamps = len(systems) + len(results) + len(news)
        at = span.start_unix_nano - stamps * US
        for content in systems:
            e = event(
                span, ctx, "message", "system", {"role": "system", "content": clip(content)}, at
            )
            e["event_id"] = system_event_id(conv, content)
            events.append(e)
            at += US
        for m in results:
            assert m.tool_call_id is not None
            self.answered.add(m.tool_call_id)
            name = next((n for i, n in self.asked.get(conv, []) if i == m.tool_call_id), "tool")
            payload = {
                "call_id": m.tool_call_id,
                "name": name,
                "ok": True,
                "content": clip(m.content),
                "error": None,
            }
            e = event(span, ctx, "tool_result", "tool_result", payload, at)
            e["event_id"] = call_event_id(span.trace_id, m.tool_call_id, "result")
            events.append(e)
            at += US
        for i, m in enumerate(news):
            payload = {"role": "user", "content": clip(m.content)}
            events.append(
                event(span, ctx, "message", "user" if i == 0 else f"user.{i}", payload, at)
            )
            at += US
        end = span.end_unix_nano or span.start_unix_nano
        failed = failure_of(span)
        if failed is not None:
            events.append(self._error(span, ctx, failed, LLM_ERROR_TOOL, "llm_call"))
            return events
        outputs = output_messages(span)
        if outputs:
            self.with_content.add(span.span_id)
        answer: Message | None = answer_of(span, outputs)
        calls = answer.tool_calls if answer else ()
        tool_calls: list[dict[str, Any]] = [
            {"id": c.id or f"{span.span_id}-{i}", "name": c.name, "arguments": c.arguments}
            for i, c in enumerate(calls)
        ]
        self.asked.setdefault(conv, []).extend((c["id"], c["name"]) for c in tool_calls)
        self.asked_by[span.span_id] = [(c["id"], c["name"]) for c in tool_calls]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": clip(answer.content) if answer else None,
            "tool_calls": tool_calls,
        }
        confidence = as_float(span.attr(*self.config.confidence_attributes))
        if confidence is not None:
            message["confidence"] = confidence
            message["confidence_source"] = "other"
        extra = usage(span)
        response_id = span.attr("gen_ai.response.id")
        if response_id is not None:
            extra["gen_ai.response.id"] = response_id
        assistant = event(span, ctx, "message", "assistant", message, end, extra)
        events.append(assistant)
        # the answer is below the containers of the span and of its outer twins (rule 1)
        twins = [self.by_id[o] for o, inner in self.twin_of.items() if inner == span.span_id]
        for anc in [*self._ancestors(span), *(a for t in twins for a in self._ancestors(t))]:
            if end >= self.last_assistant.get(anc.span_id, (0, {}))[0]:
                self.last_assistant[anc.span_id] = (end, assistant)
        for call in tool_calls:
            if self.config.is_escalation_tool(call["name"]):
                esc: dict[str, Any] = {
                    "trigger": "agent",
                    "reason": call["name"],
                    "confidence": confidence,
                }
                e = event(span, ctx, "escalation", "escalation", esc, end)
                e["event_id"] = call_event_id(span.trace_id, call["id"], "escalation")
                events.append(e)
        return events

    def _ancestors(self, span: Span) -> list[Span]:
        found: list[Span] = []
        seen = {span.span_id}
        current = span
        while (parent := self.by_id.get(current.parent_span_id)) is not None:
            if parent.span_id in seen:
                break
            seen.add(parent.span_id)
            found.append(parent)
            current = parent
        return found

    # --- rule 4: a tool ----------------------------------------------------------------------

    def _tool(self, span: Span) -> list[dict[str, Any]]:
        ctx = self.ctx(span)
        name = str(span.attr("gen_ai.tool.name", "tool.name", "traceloop.entity.name") or span.name)
        call_id = _call_id(span)
        result = span.attr("gen_ai.tool.call.result", "output.value", "traceloop.entity.output")
        if (wrapped := tool_message_in(result)) is not None:  # a LangChain ToolMessage
            result, call_id = wrapped.content, call_id or wrapped.call_id
        if call_id is None:  # the earliest call of that name not answered yet
            call_id = next(
                (
                    i
                    for i, n in self.asked.get(ctx.conversation_id, [])
                    if n == name and i not in self.answered
                ),
                None,
            )
        if call_id is None and (asked := self._sibling_call(span)) is not None:
            call_id, name = asked  # a tool span named otherwise than the call (a handoff)
        if call_id is not None:
            self.answered.add(call_id)
        failed = failure_of(span)
        if failed is None and call_id is not None and (told := self._told(call_id)) is not None:
            result = told  # what the model was given for the call
        payload = {
            "call_id": call_id or span.span_id,
            "name": name,
            "ok": failed is None,
            "content": clip(text(result)),
            "error": failed.error if failed else None,
        }
        end = span.end_unix_nano or span.start_unix_nano
        extra: dict[str, Any] = {}
        if failed is not None:
            self.out.failures["tool"] = self.out.failures.get("tool", 0) + 1
            extra = _failure_attributes(failed)
        e = event(span, ctx, "tool_result", "tool_result", payload, end, extra)
        if call_id is not None:  # one result per call, whichever span reports it
            e["event_id"] = call_event_id(span.trace_id, call_id, "result")
        events = [e]
        if self.config.is_escalation_tool(name):
            confidence = as_float(span.attr(*self.config.confidence_attributes))
            esc = {"trigger": "agent", "reason": name, "confidence": confidence}
            esc_event = event(span, ctx, "escalation", "escalation", esc, span.start_unix_nano)
            if call_id is not None:
                esc_event["event_id"] = call_event_id(span.trace_id, call_id, "escalation")
            events.append(esc_event)
        return events

    def _sibling_call(self, span: Span) -> tuple[str, str] | None:
        """The one unanswered call that an LLM span beside ``span`` (same parent: the turn
        that asked it) asked for, when exactly one is left."""
        if not span.parent_span_id:
            return None
        left = [
            (i, n)
            for s in self.children.get(span.parent_span_id, [])
            for i, n in self.asked_by.get(s.span_id, [])
            if i not in self.answered
        ]
        return left[0] if len(left) == 1 else None

    def _told(self, call_id: str) -> str | None:
        """The content of the ``tool`` message answering ``call_id`` in an LLM call's input:
        what the tool returned, when its span does not say (content captured on the calls
        only, e.g. in their log records)."""
        if self._results is None:
            self._results = {}
            for s in self.by_id.values():
                if self.kinds[s.span_id] != "llm" or s.span_id in self.wraps_llm:
                    continue
                for m in self._input(s):
                    if m.role == "tool" and m.tool_call_id:
                        self._results.setdefault(m.tool_call_id, m.content)
        return self._results.get(call_id)

    # --- rule 5, 6: agents and chains ---------------------------------------------------------

    def _agent(self, span: Span) -> list[dict[str, Any]]:
        ctx = self.ctx(span)
        confidence = as_float(span.attr(*self.config.confidence_attributes))
        events: list[dict[str, Any]] = []
        if span.span_id in self.wraps_llm:
            last = self.last_assistant.get(span.span_id)
            outermost = not any(self.kinds[a.span_id] == "agent" for a in self._ancestors(span))
            if outermost and not any(self._spoke_with_content(s) for s in self.below(span)):
                events.extend(self._content_off(span, ctx, last[1] if last else None))
            elif (last is None or last[1]["message"].get("content") is None) and self._said(span):
                # the last LLM call below asked for tools (or failed): the agent's own answer
                events.append(self._answer(span, ctx, confidence))
                confidence = None
            if confidence is not None and last is not None:
                last[1]["message"]["confidence"] = confidence
                last[1]["message"]["confidence_source"] = "other"
        elif not self.known_llm and not self.has_llm:
            # the only witness: no LLM span in the trace (nor in its part mapped before); an
            # agent span beside LLM spans (a graph's routing function named "...agent...",
            # a late agent span of a trace whose LLM calls spoke) repeats what they say
            prompt = agent_messages(span, "input")
            if prompt and prompt[-1].role == "user":
                payload = {"role": "user", "content": clip(prompt[-1].content)}
                events.append(event(span, ctx, "message", "user", payload, span.start_unix_nano))
            if confidence is not None or self._said(span):
                events.append(self._answer(span, ctx, confidence))
        failed = failure_of(span)
        if failed is not None and not self._failure_said(span):
            events.append(self._error(span, ctx, failed, AGENT_ERROR_TOOL, "agent"))
        return events

    def _spoke_with_content(self, span: Span) -> bool:
        """``span`` is an LLM span whose messages were taken: its own, or its inner twin's
        (rule 1) for one that describes the same call as a span elsewhere in the trace."""
        return span.span_id in self.with_content or self.twin_of.get(span.span_id) in (
            self.with_content
        )

    def _failure_said(self, span: Span) -> bool:
        """Rule 6: a failed span below the agent span already says its failure. An agent span
        with nothing below it was recorded beside its work, not around it (OpenLLMetry's
        ``invoke_agent`` of a LangGraph prebuilt agent, a sibling of the sub-graph's spans):
        a failed model or tool call of the trace that ended within its time says it."""
        below = self.below(span)
        if below:
            return any(failure_of(s) for s in below)
        start, end = span.start_unix_nano, span.end_unix_nano or span.start_unix_nano
        return any(
            self.kinds[s.span_id] in ("llm", "tool")
            and start <= (s.end_unix_nano or s.start_unix_nano) <= end
            and failure_of(s) is not None
            for s in self.by_id.values()
        )

    def _answer(self, span: Span, ctx: SpanContext, confidence: float | None) -> dict[str, Any]:
        """The agent span's own answer (part ``answer``), with its confidence."""
        answer = self._own_answer(span)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": clip(answer.content) if answer else None,
        }
        if confidence is not None:
            message["confidence"] = confidence
            message["confidence_source"] = "other"
        end = span.end_unix_nano or span.start_unix_nano
        return event(span, ctx, "message", "answer", message, end)

    def _said(self, span: Span) -> bool:
        """The agent span has an output of its own (an answer with text)."""
        return self._own_answer(span) is not None

    def _content_off(
        self, span: Span, ctx: SpanContext, last: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        """LLM spans without content (capture off): the agent span's input is the user
        message, its output the text of the last answer when that has neither text nor calls;
        its system instructions (``gen_ai.system_instructions``), once per conversation, just
        before (a framework that records a call's prompt only with its response, e.g.
        pydantic-ai, leaves a failed call without content: the agent span has it)."""
        events = self._agent_systems(span, ctx)
        prompt = agent_messages(span, "input")
        if prompt and prompt[-1].role == "user":
            payload = {"role": "user", "content": clip(prompt[-1].content)}
            events.append(event(span, ctx, "message", "user", payload, span.start_unix_nano))
        answer = self._own_answer(span)
        bare = last is not None and last["message"].get("content") is None
        if answer is not None and last is not None and bare and not last["message"]["tool_calls"]:
            last["message"]["content"] = clip(answer.content)
        return events

    def _agent_systems(self, span: Span, ctx: SpanContext) -> list[dict[str, Any]]:
        """The agent span's own system instructions not given yet in its conversation."""
        conv = ctx.conversation_id
        texts = [
            t for t in system_instructions(span) if system_event_id(conv, t) not in self.systems
        ]
        self.systems.update(system_event_id(conv, t) for t in texts)
        events = []
        for i, content in enumerate(texts):
            at = span.start_unix_nano - (len(texts) - i) * US
            payload = {"role": "system", "content": clip(content)}
            e = event(span, ctx, "message", "system", payload, at)
            e["event_id"] = system_event_id(conv, content)
            events.append(e)
        return events

    def _error(
        self, span: Span, ctx: SpanContext, failed: Failure, name: str, kind: str
    ) -> dict[str, Any]:
        self.out.failures[kind] = self.out.failures.get(kind, 0) + 1
        payload = {
            "call_id": f"{name}:{span.span_id}",
            "name": name,
            "ok": False,
            "content": None,
            "error": clip(failed.error),
        }
        end = span.end_unix_nano or span.start_unix_nano
        return event(span, ctx, "tool_result", "error", payload, end, _failure_attributes(failed))

    # --- configured attributes: escalation, outcome ------------------------------------------

    def _marks(self, span: Span) -> list[dict[str, Any]]:
        config = self.config
        events: list[dict[str, Any]] = []
        escalation = span.attr(*config.escalation_attributes)
        end = span.end_unix_nano or span.start_unix_nano
        if escalation not in (None, False, "false", "False", 0):
            ctx = self.ctx(span)
            reason = escalation if isinstance(escalation, str) and escalation != "true" else None
            trigger = span.attr(config.escalation_attributes[0] + ".trigger") or "agent"
            confidence = as_float(span.attr(*config.confidence_attributes))
            payload = {"trigger": trigger, "reason": reason, "confidence": confidence}
            events.append(event(span, ctx, "escalation", "escalation", payload, end))
        success = span.attributes.get(config.outcome_prefix + ".success")
        if success is not None:
            payload = {
                "success": as_bool(success),
                "reward": as_float(span.attributes.get(config.outcome_prefix + ".reward")),
                "source": span.attr(config.outcome_prefix + ".source") or "other",
            }
            events.append(event(span, self.ctx(span), "outcome", "outcome", payload, end))
        return events


def _outer_twins(spans: list[Span], kinds: dict[str, str]) -> dict[str, str]:
    """LLM spans describing the same call as another LLM span of the trace whose time lies
    within theirs, wherever the two are in the tree: an instrumentation that does not nest its
    LLM span around the client library's (OpenLLMetry's LangChain handler with openai-v2 on
    the client: siblings; OpenInference's LangChain callbacks never make their span current, so
    its openai instrumentor's span hangs under the application's span instead). The same call:
    the same ``gen_ai.response.id``, or the same output messages, or both failed. The inner one
    is the closer to the wire and speaks (rule 1); returned: each outer one's inner one."""
    llm = sorted((s for s in spans if kinds[s.span_id] == "llm"), key=lambda s: s.start_unix_nano)
    outputs: dict[str, list[Message]] = {}

    def said(s: Span) -> list[Message]:
        if s.span_id not in outputs:
            outputs[s.span_id] = output_messages(s)
        return outputs[s.span_id]

    outer: dict[str, str] = {}
    for i, a in enumerate(llm):
        for b in llm[i + 1 :]:
            if b.start_unix_nano >= a.end_unix_nano:
                break  # sorted by start: no later span begins within ``a``
            if b.start_unix_nano == a.start_unix_nano or b.end_unix_nano >= a.end_unix_nano:
                continue
            rid = a.attr("gen_ai.response.id")
            if (
                (rid is not None and rid == b.attr("gen_ai.response.id"))
                or (failure_of(a) is not None and failure_of(b) is not None)
                or (bool(said(a)) and said(a) == said(b))
            ):
                outer.setdefault(a.span_id, b.span_id)
    return outer


def _own_answer(span: Span) -> Message | None:
    """The last assistant message with text in an agent span's output (a framework's state
    output holds the whole history: its last answer is the agent's)."""
    said = [m for m in agent_messages(span, "output") if m.role == "assistant" and m.content]
    return said[-1] if said else None


def _new_user_messages(prompt: list[Message]) -> list[Message]:
    """The user messages after the last assistant or tool message of a prompt."""
    last = max((i for i, m in enumerate(prompt) if m.role in ("assistant", "tool")), default=-1)
    return [m for m in prompt[last + 1 :] if m.role == "user"]


def _call_id(span: Span) -> str | None:
    value = span.attr("gen_ai.tool.call.id", "tool_call.id")
    return None if value is None else str(value)


def _failure_attributes(failed: Failure) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if failed.error_type:
        extra["error.type"] = failed.error_type
    if failed.http_status is not None:
        extra["http.response.status_code"] = failed.http_status
    return extra
