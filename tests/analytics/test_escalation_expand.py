"""The escalation read's expansion of roll-up rows into conversations (pure, no database):
pairing the timing rows with the escalated conversations run by run gives exactly the
conversation-by-conversation pairing, and rows out of step are refused."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from monitor.analytics.escalation import ConversationEscalation
from monitor.analytics.repo_escalation import _conversation, _expand


def row(
    agent: str,
    conf: float | None,
    esc: bool,
    ok: bool | None,
    w: float,
    turns: int | None,
    bucket: int | None,
    n: int,
    kind: int | None,
) -> tuple[Any, ...]:
    return (agent, conf, esc, ok, w, turns, None, bucket, n, kind)


ROWS = [
    row("a", 0.2, True, False, 1.0, None, None, 3, 0),
    row("a", 0.4, True, True, 1.0, None, None, 2, 0),
    row("a", 0.9, False, True, 1.0, None, None, 4, 0),
    row("a", 0.5, True, None, 2.0, None, None, 1, 0),
    row("a", None, True, None, 1.0, 1, 10, 1, 1),
    row("a", None, True, None, 1.0, 2, 20, 3, 1),
    row("a", None, True, None, 1.0, 4, 40, 1, 1),
    row("a", None, True, None, 2.0, 7, 70, 1, 1),
    row("b", 0.3, False, False, 1.0, None, None, 2, None),
]


def one_by_one(rows: list[tuple[Any, ...]]) -> dict[str, list[ConversationEscalation]]:
    """The reference: every row expanded to single conversations, the k-th escalated one of an
    (agent, weight) given the k-th timing."""
    out: dict[str, list[ConversationEscalation]] = {}
    waiting: dict[tuple[str, float], list[ConversationEscalation]] = {}
    timings: dict[tuple[str, float], list[ConversationEscalation]] = {}
    for r in rows:
        for _ in range(r[8]):
            c = _conversation(r)
            if r[9] is None or (r[9] == 0 and not c.escalated):
                out.setdefault(r[0], []).append(c)
            else:
                (waiting if r[9] == 0 else timings).setdefault((r[0], c.weight), []).append(c)
    for key, convs in waiting.items():
        out.setdefault(key[0], []).extend(
            replace(c, escalation_turn=t.escalation_turn, escalation_seconds=t.escalation_seconds)
            for c, t in zip(convs, timings[key], strict=True)
        )
    return out


def test_runs_pair_like_single_conversations() -> None:
    got = _expand(ROWS)
    assert got == one_by_one(ROWS)
    assert len(got["a"]) == 10 and len(got["b"]) == 2
    # runs of 3 and 2 conversations met runs of 1, 3 and 1 timings: four different pairs
    esc = [(c.min_confidence, c.escalation_turn) for c in got["a"] if c.escalated]
    assert esc == [(0.2, 1), (0.2, 2), (0.2, 2), (0.4, 2), (0.4, 4), (0.5, 7)]


def test_rows_out_of_step_are_refused() -> None:
    with pytest.raises(ValueError, match="out of step"):
        _expand(ROWS[:-2] + ROWS[-1:])  # the weight-2 timing row is missing
