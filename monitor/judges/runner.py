"""The judge runner: which judges a conversation gets (its domain's), skipping those done.

Framework-free and without I/O: the judging loop (:mod:`monitor.judges.worker`) loads the
conversation and what was already judged, and stores what this returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
                if isinstance(j, UnsupportedFigureJudge) else j
                for j in self.judges
            ] + list(domain.judges)  # fmt: skip
        return self._by_domain[domain.name]

    async def run(self, conversation: Conversation, done: set[tuple[str, str]]) -> list[Verdict]:
        out: list[Verdict] = []
        for judge in self.judges_for(conversation):
            if (judge.name, judge.version) not in done:
                out += judge.judge(conversation)
        if self.llm is not None and (self.llm.name, self.llm.version) not in done:
            out += await self.llm.judge(conversation)
        return out
