"""The gate asks the deterministic judges about one message (``only=``): the verdicts must be
exactly those of a full run on that message, on every assistant message of the real tau2 runs
(tests/data/tau2/), with and without the airline policy as reference; and the figure judge's
reference index, built once and layered under each conversation's index, must name the same
source as indexing the references and the conversation together."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.contract.events import AgentEvent
from monitor.judges.base import Conversation
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.domains import load_domains
from monitor.judges.figures import SourceIndex, extract_figures, reference_index
from monitor.replay.tau2 import tau2_file_events


def _conversations(files: list[Path]) -> list[Conversation]:
    by_id: dict[str, list[AgentEvent]] = {}
    for path in files:
        for e in tau2_file_events(path):
            by_id.setdefault(e.conversation_id, []).append(e)
    return [Conversation.of(events) for events in by_id.values()]


@pytest.mark.parametrize("with_policy", [False, True])
def test_only_gives_the_full_runs_verdicts_on_that_message(
    tau2_files: list[Path], with_policy: bool
) -> None:
    refs = load_domains()["airline"].references if with_policy else ()
    convs = _conversations(tau2_files)
    checked = flagged = 0
    for judge in deterministic_judges(refs):
        for conv in convs:
            full = judge.judge(conv)
            for message in conv.assistant_messages():
                want = [v for v in full if v.item_id == message.event_id]
                got = judge.judge(conv, only=message.event_id)  # type: ignore[call-arg]
                assert got == want, (judge.name, message.event_id)
                checked += len(want)
                flagged += sum(v.label == 0 for v in want)
            # a prefix ending at a message (what the gate judges) agrees too
            last = conv.assistant_messages()[-1]
            upto = Conversation.of([e for e in conv.events if e.ts <= last.ts])
            want = [v for v in judge.judge(upto) if v.item_id == last.event_id]
            assert judge.judge(upto, only=last.event_id) == want  # type: ignore[call-arg]
    assert checked > 100 and flagged > 5  # the comparison covered failing verdicts too


def test_the_layered_reference_index_names_the_same_sources(tau2_files: list[Path]) -> None:
    refs = (*load_domains()["airline"].references, "Order #W2378156 ships on May 3 for $12.")
    base = reference_index(refs)
    for conv in _conversations(tau2_files):
        flat, layered = SourceIndex(), SourceIndex(base)
        for i, text in enumerate(refs):
            flat.add(text, f"reference:{i}")
        texts: list[str] = []
        for e in conv.events:
            text = (e.tool_result.content if e.tool_result else None) or (
                e.message.content if e.message else None
            )
            if text:
                texts.append(text)
                flat.add(text, e.event_id)
                layered.add(text, e.event_id)
        figures = [f for t in texts for f in extract_figures(t)]
        figures += extract_figures("#W2378156 on May 3, 2024 costs $12.00 and 2024-05-15")
        assert figures
        assert [layered.source_of(f) for f in figures] == [flat.source_of(f) for f in figures]
    assert SourceIndex(base).source_of(extract_figures("$12")[0]) == f"reference:{len(refs) - 1}"
