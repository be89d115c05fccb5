"""Judge recorded conversations without the store and compare with their outcomes (pure).

:func:`offline_judgements` runs the synchronous judges picked for each conversation (e.g.
``JudgeRunner.judges_for``: its domain's) on conversations given as events, and
returns the :class:`~monitor.judges.quality.ConversationJudgement` rows that
:func:`~monitor.judges.quality.judge_quality` measures: the same rows ``monitor judges`` builds
from stored verdicts (a judge counts on a conversation when it gave an ok verdict with a label;
it flagged it when one of them is label 0; the conversation failed when its ``outcome`` says
``success: false``, i.e. reward < 1 for tau2 runs; its scope is the first event's agent id and
context domain). Conversations without an outcome are left out. The benchmark
``bench/policy_recall.py`` and the tests use it on tau2-bench runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from monitor.contract.events import AgentEvent
from monitor.judges.base import Conversation, Judge
from monitor.judges.quality import ConversationJudgement


def by_conversation(events: Iterable[AgentEvent]) -> dict[str, list[AgentEvent]]:
    """``events`` grouped by conversation id, in first-seen order."""
    out: dict[str, list[AgentEvent]] = {}
    for e in events:
        out.setdefault(e.conversation_id, []).append(e)
    return out


def offline_judgements(
    conversations: Iterable[list[AgentEvent]],
    judges_for: Callable[[Conversation], Sequence[Judge]],
) -> list[ConversationJudgement]:
    """One row per (judge, conversation with an outcome) the judge applied to (module
    docstring); ``judges_for`` gives each conversation's judges."""
    out: list[ConversationJudgement] = []
    for events in conversations:
        outcome = next((e.outcome for e in events if e.outcome is not None), None)
        if outcome is None:
            continue
        conv = Conversation.of(events)
        first = events[0]
        domain = (first.context.domain if first.context else None) or ""
        per: dict[tuple[str, str], tuple[bool, set[str]]] = {}
        for judge in judges_for(conv):
            for v in judge.judge(conv):
                if v.status != "ok" or v.label is None:
                    continue
                flagged, cats = per.get((v.judge, v.judge_version), (False, set()))
                failed_here = v.label == 0
                per[(v.judge, v.judge_version)] = (
                    flagged or failed_here,
                    cats | set(v.categories) if failed_here else cats,
                )
        out += [
            ConversationJudgement(
                conv.conversation_id,
                name,
                version,
                flagged,
                frozenset(cats),
                not outcome.success,
                first.agent.id,
                domain,
            )
            for (name, version), (flagged, cats) in per.items()
        ]
    return out
