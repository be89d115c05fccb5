"""The inline checks the gate runs, built once per (checks, domain) and reused (pure).

The deterministic judges (:mod:`monitor.judges.deterministic`) are selected by name; the figure
judge gets the domain's reference texts; ``domain`` in a rule's checks adds the domain plugins'
own judges (:mod:`monitor.judges.domains`). Building a judge set (e.g. indexing a domain's
references) happens at the first request that needs it, never again.

:func:`verdicts_on` asks a judge about the proposed message only: the deterministic judges
then build no verdict for the earlier messages (the same verdicts on the proposal as a full
run, see :meth:`~monitor.judges.det_base.DeterministicJudge.judge`); a domain plugin's judge
runs in full and its verdicts on other items are ignored by the caller.

:class:`CheckStates` keeps, per recent conversation, each deterministic check's state over
the history a request sent (its :class:`~monitor.judges.det_base.Fold`): the conversation's
next request, whose history extends that one, costs the events it adds and its proposed
message only, with the same verdicts as :func:`verdicts_on` on the whole conversation.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from monitor.contract.events import AgentEvent
from monitor.gate.policy import DOMAIN_CHECKS
from monitor.judges.base import Conversation, Judge, Verdict
from monitor.judges.det_base import DeterministicJudge, Fold
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.domains import Domain


class CheckSet:
    """Judge instances per (selected checks, domain); ``domains`` are the loaded plugins."""

    def __init__(self, domains: Mapping[str, Domain] | None = None) -> None:
        self.domains = dict(domains or {})
        self._cache: dict[tuple[tuple[str, ...], str | None], tuple[Judge, ...]] = {}

    def judges(self, names: tuple[str, ...], domain: str | None) -> tuple[Judge, ...]:
        """The judges named in ``names`` (and the domain's own with ``domain`` listed)."""
        key = (names, domain)
        found = self._cache.get(key)
        if found is None:
            plugin = self.domains.get(domain) if domain else None
            refs = plugin.references if plugin is not None else ()
            chosen = [j for j in deterministic_judges(refs) if j.name in names]
            if DOMAIN_CHECKS in names and plugin is not None:
                chosen.extend(plugin.judges)
            found = self._cache[key] = tuple(chosen)
        return found


def verdicts_on(
    judge: Judge, conversation: Conversation, item_id: str, calls: bool = True
) -> list[Verdict]:
    """``judge``'s verdicts on ``conversation``, built for ``item_id`` only when the judge
    supports it (the caller keeps the verdicts on ``item_id`` and the errors either way).
    ``calls`` False: the message ``item_id`` calls no tool, so a deterministic judge of tool
    calls alone (``judges_calls_only``) is not run: it would give no verdict."""
    if isinstance(judge, DeterministicJudge):
        if not calls and judge.judges_calls_only:
            return []
        return judge.judge(conversation, only=item_id)
    return judge.judge(conversation)


#: the events held in all conversations' check states together, at most (oldest dropped first)
CHECK_STATE_EVENTS = 10_000


@dataclass
class _States:
    """One conversation's folds, each over exactly ``events`` (the same objects, in order)."""

    events: tuple[AgentEvent, ...] = ()
    folds: dict[int, Fold] = field(default_factory=dict)  # id(judge) -> its fold


class CheckStates:
    """The deterministic checks' state per recent conversation (a bounded LRU; see the module
    docstring).

    A state is reused only when the events before the proposed message start with exactly
    the events it was built from, the *same objects* in the same order (the history cache of
    :mod:`monitor.gate.request` hands a conversation's unchanged events back as the same
    objects; a changed, reordered, removed or re-validated event is a different one): the
    state then takes in the events after them. Any other request (an older or edited
    history, a repeat of an earlier request after a later one) builds the state afresh from
    its own events, so the order requests arrive in never changes a verdict. A check that
    raises while folding answers through :func:`verdicts_on` on the whole conversation (its
    error verdict) and its conversation's state is dropped. At most ``max_events`` events are
    held in all; the least recently asked-about conversations go first.
    """

    def __init__(self, max_events: int = CHECK_STATE_EVENTS) -> None:
        self.max_events = max_events
        self._conversations: OrderedDict[str, _States] = OrderedDict()
        self._size = 0
        self.reused = 0  # events a request did not fold again
        self.folded = 0  # events folded

    def __len__(self) -> int:
        return self._size

    def verdicts(
        self, judges: tuple[Judge, ...], conversation: Conversation, item_id: str, calls: bool
    ) -> list[list[Verdict]]:
        """Per judge, :func:`verdicts_on` ``(judge, conversation, item_id, calls)``: from the
        kept states where the message ``item_id`` is the conversation's last event."""
        events = conversation.events
        if not events or events[-1].event_id != item_id or conversation.omitted is not None:
            return [verdicts_on(j, conversation, item_id, calls) for j in judges]
        before, message = events[:-1], events[-1]
        states = self._states(conversation.conversation_id, before)
        out: list[list[Verdict]] = []
        for judge in judges:
            found = self._folded(states, judge, conversation, message, calls)
            out.append(verdicts_on(judge, conversation, item_id, calls) if found is None else found)
        return out

    def _folded(
        self,
        states: _States,
        judge: Judge,
        conversation: Conversation,
        message: AgentEvent,
        calls: bool,
    ) -> list[Verdict] | None:
        """``judge``'s verdicts on ``message`` from its fold over ``states.events``; None when
        it has no fold to ask (or a tool-call-only check and a message without calls, which
        :func:`verdicts_on` answers without running) or its fold raised."""
        if not isinstance(judge, DeterministicJudge) or (judge.judges_calls_only and not calls):
            return None
        try:
            fold = states.folds.get(id(judge))
            if fold is None:
                fold = judge.fold(conversation.conversation_id)
                if fold is None:
                    return None
                for e in states.events:
                    fold.add(e)
                self.folded += len(states.events)
                states.folds[id(judge)] = fold
            return fold.verdicts(message) if judge.applies(conversation) else []
        except Exception:  # the whole run gives the check's error verdict
            self._drop(conversation.conversation_id)
            return None

    def _states(self, conversation_id: str, before: tuple[AgentEvent, ...]) -> _States:
        """The conversation's states over ``before`` (extended or built afresh), most recent."""
        states = self._conversations.pop(conversation_id, None)
        if states is not None:
            self._size -= len(states.events)
            n = len(states.events)
            if n <= len(before) and all(
                a is b for a, b in zip(states.events, before, strict=False)
            ):
                try:
                    for fold in states.folds.values():
                        for e in before[n:]:
                            fold.add(e)
                    self.reused += n * len(states.folds)
                    self.folded += (len(before) - n) * len(states.folds)
                except Exception:  # rebuilt below, each check's own error then shows
                    states = None
            else:
                states = None
        if states is None:
            states = _States()
        states.events = before
        if len(before) <= self.max_events:
            self._conversations[conversation_id] = states
            self._size += len(before)
            while self._size > self.max_events:
                _, dropped = self._conversations.popitem(last=False)
                self._size -= len(dropped.events)
        return states

    def _drop(self, conversation_id: str) -> None:
        states = self._conversations.pop(conversation_id, None)
        if states is not None:
            self._size -= len(states.events)
