"""``det.unsupported_figure``: amounts, dates and identifiers no earlier source supports.

Pure (no I/O imports). Sources are the conversation's earlier tool results, tool-call arguments
and user/system messages, and the ``reference`` texts of the conversation's domain (a policy, a
price list: :mod:`monitor.judges.domains`), indexed before the first event. An amount the
message derives from its own supported amounts ("$174 each, $348 in all") passes. Categories:
``fabrication`` + ``fabrication:pricing`` (amounts) / ``:history`` (dates) / ``:account`` (ids).
Applies to tool-using conversations only (see :mod:`~.det_base`). On a conversation cut by the
cap (:mod:`~.truncation`), a figure after the gap that no kept source supports is unverified
(listed under ``unverified``, not counted); a message with only such figures gets no verdict.
"""

from __future__ import annotations

from monitor.contract.events import AgentEvent
from monitor.judges.base import Conversation, Verdict
from monitor.judges.det_base import DeterministicJudge, Fold
from monitor.judges.figures import (
    Figure,
    FigureSources,
    check_figures,
    derivation,
    extract_figures,
    reference_index,
)

_FIGURE_TYPES = {"amount": "pricing", "date": "history", "identifier": "account"}


class _FigureFold(Fold):
    """The figure check's state: the sources so far (the reference texts first)."""

    def __init__(self, judge: UnsupportedFigureJudge, conversation_id: str) -> None:
        super().__init__(judge, conversation_id)
        self.figure_judge = judge
        self.sources = FigureSources(judge._index)

    def verdicts(self, e: AgentEvent) -> list[Verdict]:
        msg = e.message
        if msg is None or msg.role != "assistant":
            return []
        figures = extract_figures(msg.content)
        if not figures:
            return []
        found = self.figure_judge.verdict_on(
            self.conversation_id, e, figures, self.sources.of(figures)
        )
        return [] if found is None else [found]

    def add(self, e: AgentEvent) -> None:
        self.sources.add(e)


class UnsupportedFigureJudge(DeterministicJudge):
    """Amounts, dates and identifiers that no earlier source in the conversation contains.

    ``reference`` texts (for example the agent's policy document) are sources too; they are
    indexed once, when the judge is built, and count as coming before the first event.
    """

    name = "det.unsupported_figure"
    fold_type = _FigureFold

    def __init__(self, reference: tuple[str, ...] = ()) -> None:
        self.reference = reference
        self._index = reference_index(reference)  # read by every conversation, never changed

    def _judge(self, conv: Conversation, only: str | None = None) -> list[Verdict]:
        out: list[Verdict] = []
        gap = conv.gap if conv.omitted is not None else None
        after_gap = {e.event_id for e in conv.events[gap:]} if gap is not None else set()
        for e, figures, sources in check_figures(conv.events, self._index, only):
            found = self.verdict_on(
                conv.conversation_id, e, figures, sources, e.event_id in after_gap
            )
            if found is not None:
                out.append(found)
        return out

    def verdict_on(
        self,
        conversation_id: str,
        e: AgentEvent,
        figures: list[Figure],
        sources: dict[str, str | None],
        after_gap: bool = False,
    ) -> Verdict | None:
        """The verdict on message ``e`` with ``figures`` and their ``sources``; ``after_gap``:
        it follows a capped conversation's gap (a figure no source supports may be in the
        omitted events: unverified); None when no figure is left to decide."""
        supported = [f for f in figures if sources[f.text] is not None]
        unsupported = [f for f in figures if sources[f.text] is None]
        derived = {f.text: d for f in unsupported if (d := derivation(f, supported))}
        missing = [f for f in unsupported if f.text not in derived]
        unverified = missing if after_gap else []  # may be in the gap
        if unverified:
            figures = [f for f in figures if f not in unverified]
            missing = []
            if not figures:
                return None  # nothing this check can decide
        types = {f"fabrication:{_FIGURE_TYPES[f.kind]}" for f in missing}
        evidence = {
            "unsupported": [{"kind": f.kind, "text": f.text, "key": f.key} for f in missing],
            "source_event_ids": {t: s for t, s in sources.items() if s is not None},
            "derived": derived,
        }
        if unverified:
            evidence["unverified"] = [f.text for f in unverified]
        rationale = (
            f"{len(missing)} of {len(figures)} figures appear in no earlier tool result, "
            "tool call, user message or reference: " + ", ".join(f.text for f in missing)
            if missing
            else f"all {len(figures)} figures appear in earlier sources"
        )
        if unverified:
            rationale += (
                f"; {len(unverified)} not found in the events judged may be in the "
                "omitted ones (not checked)"
            )
        score, cats = 1.0 - len(missing) / len(figures), ("fabrication", *sorted(types))
        return self._verdict(conversation_id, e, not missing, cats, evidence, rationale, score)
