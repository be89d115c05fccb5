"""The transcript view of one conversation (pure): redaction of every free-text value, the
split of gate decisions from the events, verdicts placed on their turns, the sample line."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from monitor.judges.transcript import StoredEvent, build, redact_value
from tests.factories import event_dict

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_redact_value_reaches_keys_numbers_and_nesting() -> None:
    value = {
        "password": "hunter2",
        "Token": "abc",
        "user": "jane",
        "card": 4111111111111111,
        "order": 4111111111111112,
        "nested": [{"note": "mail jane@example.com"}, 3.5, None, True],
    }
    assert redact_value(value) == {
        "password": "[secret]",
        "Token": "[secret]",
        "user": "jane",
        "card": "[card]",
        "order": 4111111111111112,  # fails Luhn: an order id, kept
        "nested": [{"note": "mail [email]"}, 3.5, None, True],
    }


def rollup(**extra: object) -> dict[str, object]:
    return {
        "agent_id": "a",
        "event_count": 4,
        "sample_rate": 0.1,
        "sample_stratum": "tier-2",
        "sampled_by_rate": False,
        "sample_weight": 0.0,
        **extra,
    }


def test_build_splits_gate_decisions_and_places_verdicts() -> None:
    bodies = [
        event_dict("m1", "c", "message", at=0, turn=0, content="hi a@b.io"),
        event_dict("g1", "c", "gate", at=1, turn=1),
        event_dict("m2", "c", "message", at=2, turn=1, content="done"),
    ]
    verdict = {
        "judge": "det.x",
        "judge_version": "1",
        "item_id": "m2",
        "status": "ok",
        "label": 0,
        "score": None,
        "categories": '["fabrication"]',
        "evidence": json.dumps({"message_event_id": "m2", "said": "token=zz"}),
        "rationale": None,
        "error": None,
        "created_at": AT,
    }
    tr = build(
        "c",
        rollup(),
        [StoredEvent(json.dumps(b), AT) for b in bodies],
        [verdict],
        kept_events=3,
    )
    assert [s.event_id for s in tr.steps] == ["m1", "m2"]
    assert [s.event_id for s in tr.gate] == ["g1"]
    assert tr.steps[0].detail["content"] == "hi [email]"
    (v,) = tr.verdicts
    assert v.turn == 1 and v.flagged and v.categories == ("fabrication",)
    assert v.evidence == {"message_event_id": "m2", "said": "token=[secret]"}
    assert tr.notes == (
        "1 of its 4 events are no longer stored (outside the sample after the unsampled "
        "window, or past retention)",
    )
    assert tr.sample.kept
    assert tr.sample.describe() == (
        "kept (pulled into the sample by an always-sample rule); stratum tier-2, rate 0.1, "
        "not sampled by rate, weight 0"
    )
    doc = tr.to_dict()
    assert doc["events"][0]["message"]["content"] == "hi [email]"
    assert doc["gate_decisions"][0]["gate"]["decision"] == "escalate"
    assert doc["sample"]["kept"] is True and doc["redacted"] is True


def test_unsampled_and_undecided_samples_say_so() -> None:
    body = event_dict("m1", "c", "message", at=0)
    one = [StoredEvent(body, AT)]
    assert (
        build("c", rollup(event_count=1), one, [], 0)
        .sample.describe()
        .startswith("unsampled; stratum tier-2")
    )
    assert build("c", {"agent_id": "a"}, one, [], 0).sample.describe() == "not decided yet"
