"""The judge contract: conversation ordering and verdict validation."""

from __future__ import annotations

import pytest

from monitor.judges.base import Conversation, Verdict
from tests.factories import event


def test_conversation_orders_ids_with_numbers_by_value_and_drops_duplicates():
    evs = [event(f"c:{n}", "c", at=0, turn=None) for n in (10, 9, 1, 2)]
    conv = Conversation.of([*evs, evs[0]])
    assert [e.event_id for e in conv.events] == ["c:1", "c:2", "c:9", "c:10"]
    later = event("c:0", "c", at=5)
    assert Conversation.of([later, *evs]).events[-1].event_id == "c:0"  # time comes first


def test_conversation_rejects_mixed_or_empty_input():
    with pytest.raises(ValueError):
        Conversation.of([])
    with pytest.raises(ValueError):
        Conversation.of([event("a", "c1"), event("b", "c2")])


def test_verdict_validation():
    with pytest.raises(ValueError):
        Verdict("j", "1", "c", "i", label=2)
    with pytest.raises(ValueError):
        Verdict("j", "1", "c", "i", score=1.5)
    with pytest.raises(ValueError):
        Verdict("j", "1", "c", "i", categories=("made_up",))
    with pytest.raises(ValueError):
        Verdict("j", "1", "c", "i", status="error")
    ok = Verdict("j", "1", "c", None, label=0, categories=("fabrication:pricing",))
    assert ok.to_dict()["categories"] == ["fabrication:pricing"]


def test_a_check_with_neither_fold_nor_judge_is_refused_when_defined() -> None:
    from monitor.judges.det_base import DeterministicJudge

    with pytest.raises(TypeError, match="Hollow defines neither a fold nor _judge"):

        class Hollow(DeterministicJudge):
            name = "det.hollow"
