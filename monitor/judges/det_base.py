"""Plumbing shared by the deterministic judges (pure: no I/O imports): the version, the scope
(tool-using conversations, assistant messages), the never-raise wrapper and verdict building.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from monitor.contract.events import AgentEvent, ToolCall
from monitor.judges.base import Conversation, Verdict
from monitor.judges.truncation import Omitted

VERSION = "3"  # 3: order writes back claims; a read again after a write is no repeat
#: Tools that only think or do nothing: calling them twice with the same text is not a repeat.
NO_OP_TOOLS = frozenset({"think", "thinking", "reflect", "scratchpad", "noop", "no_op"})
#: The tool name of a failed model call (the OTLP mapping stores a provider error that left no
#: answer as a failed ``tool_result`` of this name); the model's next answer supersedes it.
MODEL_CALL = "llm"
TOOL_USING = "tool-using conversations (a tool call or result recorded); assistant messages"


#: the encoder of :func:`canonical_arguments`, built once (``json.dumps`` builds one per call)
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
)


def canonical_arguments(arguments: dict[str, Any]) -> str:
    """Arguments as canonical JSON (sorted keys, no spaces): equal calls give equal strings."""
    return _CANONICAL.encode(arguments)


def call_ref(call: ToolCall) -> dict[str, Any]:
    return {"call_id": call.id, "name": call.name}


class Fold(ABC):
    """A judge's state over one conversation's events so far, built one event at a time:
    :meth:`verdicts` on an event from the state before it (the state unchanged), then
    :meth:`add` to take the event in. A judge's full run is that, event by event, so the state
    after a conversation's first events can be kept and extended (the gate keeps it per
    conversation: a request then costs the events it adds and its proposed message)."""

    def __init__(self, judge: DeterministicJudge, conversation_id: str) -> None:
        self.judge = judge
        self.conversation_id = conversation_id

    def omitted(self, omitted: Omitted) -> None:  # noqa: B027 (most folds ignore it)
        """Take in the summary of events left out here (a capped conversation's gap)."""

    @abstractmethod
    def verdicts(self, event: AgentEvent) -> list[Verdict]:
        """The verdicts on ``event`` given the events added so far; changes nothing."""

    @abstractmethod
    def add(self, event: AgentEvent) -> None:
        """Take ``event`` in (after :meth:`verdicts` on it, if wanted)."""


class DeterministicJudge:
    """Shared plumbing: verdict construction and the never-raise wrapper."""

    name = "det.base"
    version = VERSION
    applies_to = TOOL_USING
    #: True for a check whose verdicts are all on messages that call tools (and that cannot
    #: fail on the messages before): asked about a message without a tool call, it has none
    judges_calls_only = False
    #: the check's :class:`Fold`, built as ``fold_type(judge, conversation_id)``; None for a
    #: check that overrides :meth:`fold` or runs on whole conversations only (its own ``_judge``)
    fold_type: ClassVar[type[Fold] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A check has a fold (``fold_type`` or its own :meth:`fold`) or its own :meth:`_judge`
        (or both): one with neither is refused when its class is defined, not on its first
        conversation."""
        super().__init_subclass__(**kwargs)
        folds = cls.fold_type is not None or cls.fold is not DeterministicJudge.fold
        if not folds and cls._judge is DeterministicJudge._judge:
            raise TypeError(f"{cls.__name__} defines neither a fold nor _judge")

    def applies(self, conversation: Conversation) -> bool:
        """True when this check has an opinion on ``conversation`` (see ``applies_to``)."""
        return conversation.uses_tools()

    def judge(self, conversation: Conversation, only: str | None = None) -> list[Verdict]:
        """All verdicts on ``conversation`` (see the module docstring); none when the check
        does not apply; never raises. ``only``: the verdicts on the message with that event id
        alone (what the gate asks about its proposed message): exactly those of
        ``judge(conversation)`` whose ``item_id`` is ``only``, without building the others."""
        try:
            if not self.applies(conversation):
                return []
            return self._judge(conversation) if only is None else self._judge(conversation, only)
        except Exception as exc:  # the contract: a judge never raises
            return [
                Verdict(
                    judge=self.name,
                    judge_version=self.version,
                    conversation_id=conversation.conversation_id,
                    item_id=None,
                    status="error",
                    error=f"{type(exc).__name__}: {exc}",
                )
            ]

    def fold(self, conversation_id: str) -> Fold | None:
        """A new :class:`Fold` of this check for a conversation, or None when the check has
        none (it is then run on whole conversations only)."""
        return None if self.fold_type is None else self.fold_type(self, conversation_id)

    def _judge(self, conv: Conversation, only: str | None = None) -> list[Verdict]:
        """The verdicts of this check on ``conv`` (may raise; ``judge`` turns that into an
        error verdict); with ``only``, those on that message alone. This default runs the
        check's :meth:`fold` over the events; a check without one overrides it."""
        fold = self.fold(conv.conversation_id)
        assert fold is not None, f"{self.name}: no fold (checked by __init_subclass__)"
        out: list[Verdict] = []
        for i, e in enumerate(conv.events):
            if i == conv.gap and conv.omitted is not None:
                fold.omitted(conv.omitted)
            if only is None or e.event_id == only:
                out.extend(fold.verdicts(e))
            fold.add(e)
        return out

    def _verdict(
        self,
        conv: Conversation | str,
        message: AgentEvent,
        ok: bool,
        categories: tuple[str, ...],
        evidence: dict[str, Any],
        rationale: str,
        score: float | None = None,
    ) -> Verdict:
        return Verdict(
            judge=self.name,
            judge_version=self.version,
            conversation_id=conv if isinstance(conv, str) else conv.conversation_id,
            item_id=message.event_id,
            label=1 if ok else 0,
            score=(1.0 if ok else 0.0) if score is None else score,
            categories=() if ok else categories,
            evidence={"message_event_id": message.event_id, **evidence},
            rationale=rationale,
        )
