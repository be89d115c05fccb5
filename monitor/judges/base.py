"""The judge contract: what a judge reads, what it returns (pure; no I/O imports).

A judge reads one sampled conversation (its events, ordered) and returns one :class:`Verdict`
per assistant message it has an opinion on (``item_id`` = that message's ``event_id``) and/or
one conversation-level verdict (``item_id is None``). Judges never raise for a bad conversation
or a failing endpoint: they return verdicts with ``status="error"`` and a ``error`` reason, so a
judge failure never blocks anything downstream.

Applicability: every judge states when it applies (``applies_to``); on a conversation outside
that scope it returns no verdict at all, so "did not apply" is never counted as a pass or a
fail.

Labels: ``label=1`` means the message was right, ``0`` wrong, ``None`` no opinion (for example a
check that found nothing to check). ``score`` in [0, 1] is the judge's graded view (1 = fully
correct) when it has one. ``categories`` are values of :data:`FAILURE_CATEGORIES` (plus, for
fabrication, ``fabrication:<type>`` with a type from :data:`FABRICATION_TYPES`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from itertools import pairwise
from typing import Any, Literal, Protocol, get_args

from monitor.contract.events import AgentEvent
from monitor.judges.truncation import Omitted, split, summarise

VerdictStatus = Literal["ok", "error"]

FailureCategory = Literal[
    "wrong_action",
    "wrong_arguments",
    "wrong_information",
    "policy_violation",
    "partial_resolution",
    "fabrication",
]
FabricationType = Literal[
    "policy",
    "pricing",
    "availability",
    "procedure",
    "authorization",
    "citation",
    "account",
    "history",
]
FAILURE_CATEGORIES: tuple[FailureCategory, ...] = get_args(FailureCategory)
FABRICATION_TYPES: tuple[FabricationType, ...] = get_args(FabricationType)
ALL_CATEGORIES = FAILURE_CATEGORIES + tuple(f"fabrication:{t}" for t in FABRICATION_TYPES)


@lru_cache(maxsize=4096)
def _natural(event_id: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders digit runs by value: ``c:9`` before ``c:10`` (memoized: a pure
    function of the id, and a conversation's ids come back with every gate request; only ties
    of time and turn need it, so a few thousand ids suffice, and a larger memo only fills for
    an hour in a worker, whose judges see each id once)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part)
        for part in re.split(r"(\d+)", event_id)
        if part
    )


def _time_key(e: AgentEvent) -> tuple[Any, int]:
    return e.ts, e.turn if e.turn is not None else -1


@dataclass(frozen=True, slots=True)
class Conversation:
    """The input of every judge: one conversation's events in (ts, turn, event_id) order, the
    event ids compared with their digit runs as numbers (``c:9`` before ``c:10``).

    A conversation above the cap on events judged (:mod:`~monitor.judges.truncation`) holds its
    first and last events only: ``omitted`` summarises the ones between them, and ``gap`` is
    the index in ``events`` of the first event after them (both None when nothing is left out).
    """

    conversation_id: str
    events: tuple[AgentEvent, ...]
    agent_uses_tools: bool = False  # the agent called tools in other conversations
    omitted: Omitted | None = None
    gap: int | None = None
    # uses_tools() of these events, computed at its first call (every judge asks)
    _tool_use: bool | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def of(
        cls,
        events: Sequence[AgentEvent],
        agent_uses_tools: bool = False,
        omitted: Omitted | None = None,
    ) -> Conversation:
        """Order ``events`` (one conversation, any order, duplicates by event_id dropped).
        ``agent_uses_tools``: the agent is known to call tools elsewhere (from the store).
        ``omitted``: the events left out between the ones given (the store's summary).

        Raises ValueError when ``events`` is empty or spans several conversations.
        """
        if not events:
            raise ValueError("a conversation needs at least one event")
        cids = {e.conversation_id for e in events}
        if len(cids) != 1:
            raise ValueError(f"events of {len(cids)} conversations given, expected one")
        ordered = _ordered(events)
        gap = None
        if omitted is not None:
            ids = [e.event_id for e in ordered]
            gap = ids.index(omitted.resume_at) if omitted.resume_at in ids else len(ids)
        return cls(next(iter(cids)), ordered, agent_uses_tools, omitted, gap)

    @classmethod
    def capped(
        cls, events: Sequence[AgentEvent], max_events: int, agent_uses_tools: bool = False
    ) -> Conversation:
        """:meth:`of`, keeping the first and last events within ``max_events`` and summarising
        the others (:func:`~monitor.judges.truncation.split`): what the store loads for a
        long conversation, for events already in memory."""
        if not events:
            raise ValueError("a conversation needs at least one event")
        ordered = _ordered(events)
        head, tail = split(len(ordered), max_events)
        if not tail:
            return cls.of(ordered, agent_uses_tools)
        kept, rest = ordered[:head] + ordered[-tail:], ordered[head:-tail]
        resume_at, after = ordered[-tail].event_id, ordered[head - 1].event_id
        omitted = summarise(rest, len(ordered), max_events, resume_at, after)
        return cls.of(kept, agent_uses_tools, omitted)

    def domain(self) -> str | None:
        """The first ``context.domain`` among the events (None when no event names one)."""
        return next((e.context.domain for e in self.events if e.context and e.context.domain), None)

    def uses_tools(self) -> bool:
        """True for a tool-using agent: it called a tool (or a tool result is recorded) in this
        conversation, or ``agent_uses_tools`` (it does elsewhere). The test of the judges that
        apply to tool-using agents only: question-answer traffic without tools fails it."""
        if self.agent_uses_tools:
            return True
        found = self._tool_use
        if found is None:
            found = any(
                e.tool_result is not None or (e.message is not None and bool(e.message.tool_calls))
                for e in self.events
            )
            object.__setattr__(self, "_tool_use", found)  # frozen: a memo, not a field change
        return found

    def assistant_messages(self) -> list[AgentEvent]:
        """The assistant ``message`` events, in order."""
        return [e for e in self.events if e.message is not None and e.message.role == "assistant"]


def _ordered(events: Sequence[AgentEvent]) -> tuple[AgentEvent, ...]:
    unique = {e.event_id: e for e in events}.values()
    ordered = sorted(unique, key=_time_key)  # the ids decide ties only: rarely needed
    if any(_time_key(a) == _time_key(b) for a, b in pairwise(ordered)):
        ordered = sorted(unique, key=lambda e: (*_time_key(e), _natural(e.event_id)))
    return tuple(ordered)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One judge's opinion on one item (or on the whole conversation when ``item_id`` is None).

    ``latency_ms`` is the wall time the judge spent (0 for instant checks); ``evidence`` is a
    JSON-ready mapping naming the messages and tool calls the verdict rests on.
    """

    judge: str
    judge_version: str
    conversation_id: str
    item_id: str | None
    status: VerdictStatus = "ok"
    label: int | None = None
    score: float | None = None
    categories: tuple[str, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict)
    rationale: str | None = None
    error: str | None = None
    latency_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.label not in (None, 0, 1):
            raise ValueError(f"label must be 0, 1 or None, got {self.label!r}")
        if self.score is not None and not 0.0 <= self.score <= 1.0:
            raise ValueError(f"score must be in [0, 1], got {self.score!r}")
        unknown = [c for c in self.categories if c not in ALL_CATEGORIES]
        if unknown:
            raise ValueError(f"unknown categories {unknown}")
        if self.status == "error" and not self.error:
            raise ValueError("an error verdict needs an error reason")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the shape stored in Postgres and sent on judge topics)."""
        return {**asdict(self), "categories": list(self.categories)}


class Judge(Protocol):
    """A synchronous, pure judge (deterministic checks). LLM judges are async; see llm.py."""

    name: str
    version: str
    applies_to: str  # when the judge has an opinion, in words ("tool-using conversations")

    def judge(self, conversation: Conversation) -> list[Verdict]:
        """All verdicts on ``conversation``; never raises for conversation content. A judge
        that does not apply to the conversation returns no verdict (neither pass nor fail)."""
        ...
