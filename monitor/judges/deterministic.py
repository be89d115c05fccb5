"""Deterministic judges: checks that need no LLM (pure: no I/O imports).

Scope: every check here applies to **tool-using conversations only** (the agent called a tool or
a tool result is recorded, :meth:`Conversation.uses_tools`) and judges assistant messages only.
On question-answer traffic without tools they return no verdict: a figure or a "done" in a
trivia answer is not measured against tool output that does not exist.

- ``det.authorization``: an assistant message claims an action was done ("has been cancelled")
  with no successful (``ok=True``) matching tool call before it (:mod:`~.lexicon`). Categories
  ``fabrication``, ``fabrication:authorization``.
- ``det.repeated_call``: same tool, identical arguments (canonical JSON) called again; thinking
  and no-op tools (:data:`NO_OP_TOOLS`, e.g. ``think``) are ignored. A retry
  after a *transient* error (timeout, 429, 5xx, "try again") passes; a repeat after a success or
  after a permanent error (not found, validation: it cannot succeed) fails. ``wrong_action``.
- ``det.ignored_error``: the next assistant text after a failed tool result speaks of success
  without acknowledging a problem (a failure superseded by a later success of the same tool is
  not checked, nor a failed model call, ``MODEL_CALL``, that the model's next answer
  superseded: the provider's error was retried, not ignored). ``wrong_information``.
- ``det.unsupported_figure``: an amount, date or identifier found in no earlier tool result,
  tool-call arguments, user/system message or ``reference`` text (:mod:`~.figures`); an amount
  the message derives from its own supported amounts ("$174 each, $348 in all") passes.
  ``fabrication`` + ``fabrication:pricing`` (amounts) / ``:history`` (dates) / ``:account`` (ids).

Labels: each judge returns one verdict per assistant message it *checked*: ``label=0`` when the
check fails, ``label=1`` when it passes (so agreement with ground truth can be measured on both
classes). ``label=1`` means "this check passed", not "the message is right". A message with
nothing to check (no claim, no tool call, no preceding error, no figure) gets no verdict.
``score`` equals the label except for figures (share of supported figures). Evidence names
``message_event_id`` and the (earlier, or the message's own) tool calls involved; a list of
earlier items cites at most the first and last few, with their total (:mod:`~.evidence`), so
every judge is linear in the conversation's length. A judge never raises for content: an
unexpected exception becomes one ``status="error"`` verdict.
"""

from __future__ import annotations

from typing import Any

from monitor.contract.events import AgentEvent, ToolCall
from monitor.judges.base import Conversation, Judge, Verdict
from monitor.judges.det_base import MODEL_CALL, DeterministicJudge, Fold, call_ref
from monitor.judges.det_base import NO_OP_TOOLS as NO_OP_TOOLS
from monitor.judges.det_base import TOOL_USING as TOOL_USING
from monitor.judges.det_base import VERSION as VERSION
from monitor.judges.det_base import canonical_arguments as canonical_arguments
from monitor.judges.evidence import Bounded
from monitor.judges.figure_judge import UnsupportedFigureJudge
from monitor.judges.lexicon import (
    acknowledges_problem,
    backed_families,
    find_claims,
    is_read_only,
    is_transient,
    speaks_of_success,
)
from monitor.judges.truncation import Omitted

_IGNORED_WHY = (
    "acknowledges the failed tool call",
    "speaks of success after a failed tool call",
    "neither claims success nor acknowledges a problem: the error is not ignored",
)
_AUTH = ("fabrication", "fabrication:authorization")


def _failure(result: AgentEvent) -> dict[str, Any]:
    tr = result.tool_result
    assert tr is not None
    error = (tr.error or tr.content or "")[:300]
    return {
        "result_event_id": result.event_id,
        "call_id": tr.call_id,
        "name": tr.name,
        "error": error,
    }


class _AuthorizationFold(Fold):
    def __init__(self, judge: DeterministicJudge, conversation_id: str) -> None:
        super().__init__(judge, conversation_id)
        self.calls: dict[str, ToolCall] = {}
        self.backing: dict[str, Bounded[dict[str, Any]]] = {}  # family -> its successful calls

    def _backs(self, name: str, ref: dict[str, Any]) -> None:
        for family in backed_families(name):
            self.backing.setdefault(family, Bounded()).append(ref)

    def omitted(self, omitted: Omitted) -> None:  # the tools that succeeded in the gap
        for name, n in omitted.tool_successes.items():
            self._backs(name, {"name": name, "omitted_successes": n})

    def verdicts(self, e: AgentEvent) -> list[Verdict]:
        if e.message is None or e.message.role != "assistant":
            return []
        claims = find_claims(e.message.content)
        if not claims:
            return []
        entries, missing = [], []
        for claim in claims:
            found = self.backing.get(claim.family) or Bounded()
            cited = {"family": claim.family, "phrase": claim.phrase}
            cited["sentence"] = claim.sentence  # dataclasses.asdict(claim)
            entries.append(found.cite("supported_by", cited))
            if not found:
                missing.append(claim.family)
        rationale = (
            f"claims {', '.join(sorted(set(missing)))} done with no successful matching "
            "tool call before it"
            if missing
            else "every action claim is backed by a successful tool call"
        )
        evidence = {"claims": entries, "unsupported_families": missing}
        verdict = self.judge._verdict
        return [verdict(self.conversation_id, e, not missing, _AUTH, evidence, rationale)]

    def add(self, e: AgentEvent) -> None:
        if e.tool_result is not None and e.tool_result.ok:
            tr = e.tool_result
            call = self.calls.get(tr.call_id) or ToolCall(id=tr.call_id, name=tr.name)
            self._backs(call.name, {**call_ref(call), "result_event_id": e.event_id})
        if e.message is not None:
            self.calls.update((c.id, c) for c in e.message.tool_calls)


class AuthorizationFabricationJudge(DeterministicJudge):
    """Claims of a done action without a successful matching tool call before the message."""

    name = "det.authorization"

    fold_type = _AuthorizationFold


def _calls_of(event: AgentEvent) -> tuple[list[ToolCall], list[tuple[str, str]]]:
    """The calls of an assistant message but thinking and no-op ones, and their keys (name,
    canonical arguments); none for any other event."""
    msg = event.message
    if msg is None or msg.role != "assistant" or not msg.tool_calls:
        return [], []
    calls = [c for c in msg.tool_calls if c.name.lower() not in NO_OP_TOOLS]
    return calls, [(c.name, canonical_arguments(c.arguments)) for c in calls]


class _RepeatedCallFold(Fold):
    def __init__(self, judge: DeterministicJudge, conversation_id: str) -> None:
        super().__init__(judge, conversation_id)
        self.results: dict[str, AgentEvent] = {}  # call id -> its result, among earlier events
        self.seen: dict[tuple[str, str], tuple[AgentEvent, ToolCall]] = {}
        self.reads: set[tuple[str, str]] = set()  # the keys of ``seen`` that are read-only calls

    def verdicts(self, event: AgentEvent) -> list[Verdict]:
        calls, keys = _calls_of(event)
        if not calls:
            return []  # no call, or only thinking: nothing to repeat
        repeats: list[dict[str, Any]] = []
        retries: list[dict[str, Any]] = []
        here: dict[tuple[str, str], tuple[AgentEvent, ToolCall]] = {}  # this message's calls
        for call, key in zip(calls, keys, strict=True):
            if (before := here.get(key) or self.seen.get(key)) is not None:
                prev_msg, prev = before
                result = self.results.get(prev.id)
                tr = result.tool_result if result is not None else None
                entry = {
                    **call_ref(call),
                    "arguments": call.arguments,
                    "previous_call_id": prev.id,
                    "previous_message_event_id": prev_msg.event_id,
                    "previous_result_event_id": result.event_id if result else None,
                    "previous_ok": tr.ok if tr else None,
                }
                transient = tr is not None and not tr.ok and is_transient(tr.error or tr.content)
                (retries if transient else repeats).append(entry)
            here[key] = (event, call)
        rationale = (
            f"repeats {', '.join(r['name'] for r in repeats)} with identical arguments"
            if repeats
            else "no identical repeat (or only retries after a transient error)"
        )
        evidence = {
            "calls": [call_ref(c) for c in calls],
            "repeats": repeats,
            "transient_retries": retries,
        }
        verdict = self.judge._verdict
        ok = not repeats
        return [verdict(self.conversation_id, event, ok, ("wrong_action",), evidence, rationale)]

    def add(self, event: AgentEvent) -> None:
        tr_now = event.tool_result
        if tr_now is not None:
            self.results[tr_now.call_id] = event
            if tr_now.ok and self.reads and not is_read_only(tr_now.name):  # reads may differ
                for k in self.reads:
                    self.seen.pop(k, None)
                self.reads.clear()
        calls, keys = _calls_of(event)
        self.reads.update(k for k in keys if is_read_only(k[0]))
        self.seen.update(zip(keys, ((event, c) for c in calls), strict=True))


class RepeatedToolCallJudge(DeterministicJudge):
    """The same tool with identical arguments called again (a transient-error retry is fine,
    and so is a read-only call made again after a write succeeded: the state it reads may have
    changed)."""

    name = "det.repeated_call"
    judges_calls_only = True

    fold_type = _RepeatedCallFold


class _IgnoredErrorFold(Fold):
    def __init__(self, judge: DeterministicJudge, conversation_id: str) -> None:
        super().__init__(judge, conversation_id)
        self.pending: dict[str, AgentEvent] = {}  # failed results not yet answered in text
        self.by_tool: dict[str, list[str]] = {}  # tool name -> ids of its pending failures

    def _open(self, e: AgentEvent) -> list[AgentEvent]:
        """The failed results that assistant message ``e`` answers (a failed model call is
        superseded by the message itself); [] for any other event or a message without text."""
        msg = e.message
        if msg is None or msg.role != "assistant" or not msg.content or not self.pending:
            return []
        answered = set(self.by_tool.get(MODEL_CALL, ()))  # the model call succeeded
        return [p for event_id, p in self.pending.items() if event_id not in answered]

    def verdicts(self, e: AgentEvent) -> list[Verdict]:
        pending = self._open(e)
        if not pending:
            return []
        content = e.message.content if e.message is not None else None
        acknowledged = acknowledges_problem(content)
        success = speaks_of_success(content)
        ok = acknowledged or not success
        rationale = _IGNORED_WHY[0 if acknowledged else 1 if success else 2]
        failed = Bounded(items=(_failure(p) for p in pending))
        evidence = failed.cite("failed_calls", {"acknowledged": acknowledged})
        verdict = self.judge._verdict
        return [verdict(self.conversation_id, e, ok, ("wrong_information",), evidence, rationale)]

    def add(self, e: AgentEvent) -> None:
        tr = e.tool_result
        if tr is not None:
            if tr.ok:  # a later success of the same tool supersedes its failures
                for event_id in self.by_tool.pop(tr.name, ()):
                    self.pending.pop(event_id, None)
            else:
                self.pending[e.event_id] = e
                self.by_tool.setdefault(tr.name, []).append(e.event_id)
            return
        answered = bool(self._open(e))  # answered in text: the failures are settled
        msg = e.message
        if msg is not None and msg.role == "assistant":  # the model call succeeded
            for event_id in self.by_tool.pop(MODEL_CALL, ()):
                self.pending.pop(event_id, None)
        if answered:
            self.pending, self.by_tool = {}, {}


class IgnoredToolErrorJudge(DeterministicJudge):
    """The next assistant text after a failed tool result talks as if it had worked."""

    name = "det.ignored_error"

    fold_type = _IgnoredErrorFold


def deterministic_judges(reference: tuple[str, ...] = ()) -> list[Judge]:
    """One instance of each deterministic judge; ``reference`` goes to the figure judge."""
    checks = (AuthorizationFabricationJudge(), RepeatedToolCallJudge(), IgnoredToolErrorJudge())
    return [*checks, UnsupportedFigureJudge(reference)]


def run_all(conversation: Conversation, reference: tuple[str, ...] = ()) -> list[Verdict]:
    """The verdicts of every deterministic judge on ``conversation``, judge by judge."""
    return [v for j in deterministic_judges(reference) for v in j.judge(conversation)]
