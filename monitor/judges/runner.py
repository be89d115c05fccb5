"""The judge runner: which judges a conversation gets (its domain's), skipping those done.

Framework-free and without I/O: the judging loop (:mod:`monitor.judges.worker`) loads the
conversation and what was already judged, runs :meth:`JudgeRunner.deterministic` (CPU only)
off the event loop, awaits the LLM judge, and stores what this returns.

Time budget: :meth:`JudgeRunner.deterministic` starts no judge once ``deadline`` has passed;
each judge it did not start gets one ``status="error"`` verdict saying so (a judge that started
runs to its end: the judges are linear in the events judged, which the cap bounds). Verdicts on
a conversation cut by the cap carry the cap under ``evidence["truncated"]``
(:func:`mark_truncated`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from monitor.judges.base import Conversation, Judge, Verdict
from monitor.judges.domains import Domain
from monitor.judges.figure_judge import UnsupportedFigureJudge
from monitor.judges.llm import LLMJudge


class JudgeRunner:
    """Runs the configured judges on one conversation, skipping those already done.

    ``domains`` (by ``context.domain``) add their reference texts to the figure judge and
    their own checks to the list, for that domain's conversations only.
    """

    def __init__(
        self,
        judges: Sequence[Judge],
        llm: LLMJudge | None = None,
        domains: Mapping[str, Domain] | None = None,
    ) -> None:
        self.judges = list(judges)
        self.llm = llm
        self.domains = dict(domains or {})
        self._by_domain: dict[str, list[Judge]] = {}

    def judges_for(self, conversation: Conversation) -> list[Judge]:
        """The judges of ``conversation``'s domain (the configured ones when it has none)."""
        domain = self.domains.get(conversation.domain() or "")
        if domain is None:
            return self.judges
        if domain.name not in self._by_domain:
            self._by_domain[domain.name] = [
                UnsupportedFigureJudge(j.reference + domain.references)
                if isinstance(j, UnsupportedFigureJudge)
                else j
                for j in self.judges
            ] + list(domain.judges)
        return self._by_domain[domain.name]

    def deterministic(
        self,
        conversation: Conversation,
        done: set[tuple[str, str]],
        deadline: float | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> list[Verdict]:
        """The verdicts of the synchronous judges not in ``done`` (CPU only: safe to run in a
        worker thread). No judge starts after ``deadline`` (a ``now()`` value): each one left
        gets an error verdict naming the budget."""
        out: list[Verdict] = []
        for judge in self.judges_for(conversation):
            if (judge.name, judge.version) in done:
                continue
            if deadline is not None and now() >= deadline:
                out.append(_over_budget(judge, conversation))
                continue
            out += judge.judge(conversation)
        return out

    async def run(self, conversation: Conversation, done: set[tuple[str, str]]) -> list[Verdict]:
        """Every verdict on ``conversation`` (the deterministic judges on the calling thread,
        then the LLM judge), marked when the conversation was cut by the cap."""
        out = self.deterministic(conversation, done)
        out += await self.llm_verdicts(conversation, done)
        return mark_truncated(conversation, out)

    async def llm_verdicts(
        self, conversation: Conversation, done: set[tuple[str, str]]
    ) -> list[Verdict]:
        """The LLM judge's verdicts (none without an LLM judge or when it is in ``done``)."""
        if self.llm is not None and (self.llm.name, self.llm.version) not in done:
            return await self.llm.judge(conversation)
        return []


def _over_budget(judge: Judge, conversation: Conversation) -> Verdict:
    return Verdict(
        judge=judge.name,
        judge_version=judge.version,
        conversation_id=conversation.conversation_id,
        item_id=None,
        status="error",
        error="time_budget: the conversation's judging time budget ran out before this judge",
    )


def mark_truncated(conversation: Conversation, verdicts: list[Verdict]) -> list[Verdict]:
    """``verdicts`` with ``evidence["truncated"]`` = the cap's details when ``conversation``
    was cut by the cap (:meth:`~monitor.judges.truncation.Omitted.details`), else unchanged."""
    if conversation.omitted is None:
        return verdicts
    details = conversation.omitted.details()
    return [replace(v, evidence={**v.evidence, "truncated": details}) for v in verdicts]
