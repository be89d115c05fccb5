"""tau2-bench results -> agent-event/v1, checked against the raw JSON of the two real files."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from monitor.contract.events import AgentEvent, decode_event
from monitor.core.errors import ReplayError
from monitor.replay.tau2 import is_tau2_results, tau2_events, tau2_file_events

# Regression pins, found by reading the files (the tests below also derive them from the JSON).
PINNED = {
    "airline_gemini2_5_flash_10tasks_2t.json": {
        "message": 303,
        "tool_result": 79,
        "escalation": 13,
        "outcome": 20,
    },
    "airline_gemini2_5_flash_10tasks_2t_retry_agent.json": {
        "message": 304,
        "tool_result": 88,
        "escalation": 12,
        "outcome": 20,
    },
}


def _raw(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _expected_counts(raw: dict[str, Any]) -> Counter[str]:
    want: Counter[str] = Counter()
    for sim in raw["simulations"]:
        want["outcome"] += 1
        for msg in sim["messages"]:
            if msg["role"] == "tool":
                want["tool_result"] += 1
                continue
            want["message"] += 1
            for call in msg.get("tool_calls") or []:
                want["escalation"] += call["name"] == "transfer_to_human_agents"
    return want


def _utc(naive: str) -> datetime:
    return datetime.fromisoformat(naive).replace(tzinfo=UTC)


def _by_conversation(events: list[AgentEvent]) -> dict[str, list[AgentEvent]]:
    out: dict[str, list[AgentEvent]] = {}
    for e in events:
        out.setdefault(e.conversation_id, []).append(e)
    return out


def test_counts_per_type_match_raw_json(tau2_files: list[Path]) -> None:
    assert [p.name for p in tau2_files] == sorted(PINNED)
    for path in tau2_files:
        got = Counter(e.type for e in tau2_file_events(path))
        assert got == _expected_counts(_raw(path))
        assert got == Counter(PINNED[path.name])  # no feedback in tau2


def test_messages_keep_role_content_turn_and_utc_ts(tau2_files: list[Path]) -> None:
    for path in tau2_files:
        convs = _by_conversation(tau2_file_events(path))
        for sim in _raw(path)["simulations"]:
            msgs = [e for e in convs[f"tau2:{sim['id']}"] if e.type in ("message", "tool_result")]
            assert len(msgs) == len(sim["messages"])
            for event, raw in zip(msgs, sim["messages"], strict=True):
                assert event.turn == raw["turn_idx"]
                assert event.ts == _utc(raw["timestamp"])
                assert event.ts.utcoffset() is not None
                if raw["role"] == "tool":
                    assert event.tool_result is not None
                    continue
                assert event.message is not None
                assert event.message.role == raw["role"]
                assert event.message.content == raw["content"]
                assert event.message.confidence is None


def test_every_tool_call_kept_with_arguments(tau2_files: list[Path]) -> None:
    for path in tau2_files:
        want = [
            (f"tau2:{sim['id']}", c["id"], c["name"], c["arguments"])
            for sim in _raw(path)["simulations"]
            for m in sim["messages"]
            for c in m.get("tool_calls") or []
        ]
        got = [
            (e.conversation_id, c.id, c.name, c.arguments)
            for e in tau2_file_events(path)
            if e.message is not None
            for c in e.message.tool_calls
        ]
        assert got == want
        assert len(want) > 70


def test_tool_results_flag_errors_and_name_the_call(tau2_files: list[Path]) -> None:
    failures = 0
    for path in tau2_files:
        events = tau2_file_events(path)
        names = {c.id: c.name for e in events if e.message for c in e.message.tool_calls}
        results = [e.tool_result for e in events if e.tool_result is not None]
        raws = [m for s in _raw(path)["simulations"] for m in s["messages"] if m["role"] == "tool"]
        assert len(results) == len(raws)
        for res, raw in zip(results, raws, strict=True):
            assert res.call_id == raw["id"]
            assert res.name == names[raw["id"]]
            assert res.ok is (not raw["error"])
            assert res.content == raw["content"]
            assert res.error == (raw["content"] if raw["error"] else None)
            failures += raw["error"]
    assert failures == 8 + 5  # 8 failing tool results in the plain file, 5 in the retry file


def test_escalation_right_after_each_transfer_call(tau2_files: list[Path]) -> None:
    for path in tau2_files:
        events = tau2_file_events(path)
        transfers = 0
        for i, e in enumerate(events):
            calls = (
                [c for c in e.message.tool_calls if c.name == "transfer_to_human_agents"]
                if (e.message)
                else []
            )
            if calls:
                transfers += 1
                esc = events[i + 1]
                assert esc.escalation is not None
                assert esc.escalation.trigger == "agent"
                assert esc.escalation.reason == calls[0].arguments["summary"]
                assert esc.escalation.confidence is None
                assert (esc.ts, esc.turn, esc.conversation_id) == (e.ts, e.turn, e.conversation_id)
            if e.escalation is not None:
                assert events[i - 1].message is not None
        assert transfers == sum(1 for e in events if e.escalation is not None) > 0


def test_one_outcome_per_simulation_with_the_reward(tau2_files: list[Path]) -> None:
    for path in tau2_files:
        raw = _raw(path)
        convs = _by_conversation(tau2_file_events(path))
        assert len(convs) == len(raw["simulations"]) == 20
        for sim in raw["simulations"]:
            conv = convs[f"tau2:{sim['id']}"]
            outcomes = [e for e in conv if e.outcome is not None]
            assert len(outcomes) == 1 and conv[-1] is outcomes[0]
            out = outcomes[0].outcome
            assert out is not None
            reward = sim["reward_info"]["reward"]
            assert (out.reward, out.success, out.source) == (reward, reward >= 1.0, "ground_truth")
            assert outcomes[0].ts > max(e.ts for e in conv[:-1])
            assert outcomes[0].context is not None
            assert outcomes[0].context.task_id == sim["task_id"]
            assert outcomes[0].context.trial == sim["trial"]


def test_identity_is_deterministic_and_distinct(tau2_files: list[Path]) -> None:
    runs = [[e.to_json() for e in tau2_file_events(p)] for p in tau2_files]
    assert runs == [[e.to_json() for e in tau2_file_events(p)] for p in tau2_files]
    ids = [e.event_id for p in tau2_files for e in tau2_file_events(p)]
    assert len(ids) == len(set(ids)) == 415 + 424
    agents = {p.name: {e.agent.id for e in tau2_file_events(p)} for p in tau2_files}
    assert agents == {
        "airline_gemini2_5_flash_10tasks_2t.json": {"llm_agent:gemini/gemini-2.5-flash"},
        "airline_gemini2_5_flash_10tasks_2t_retry_agent.json": {
            "retry_agent:gemini/gemini-2.5-flash"
        },
    }
    first = tau2_file_events(tau2_files[0])[0]
    assert first.event_id == f"{first.conversation_id}:0"
    assert first.context is not None
    assert (first.context.domain, first.context.channel) == ("airline", "chat")


def test_all_events_validate_through_the_contract(tau2_files: list[Path]) -> None:
    for path in tau2_files:
        for event in tau2_file_events(path):
            assert decode_event(event.to_json()) == event


def test_is_tau2_results(tau2_files: list[Path]) -> None:
    assert all(is_tau2_results(_raw(p)) for p in tau2_files)
    assert not is_tau2_results([])
    assert not is_tau2_results({"info": {}})
    assert not is_tau2_results({"info": {}, "simulations": [{"id": "x"}]})
    event = tau2_file_events(tau2_files[0])[0].to_dict()
    assert not is_tau2_results(event)


def _sim(**over: Any) -> dict[str, Any]:
    sim: dict[str, Any] = {
        "id": "s1",
        "task_id": 3,
        "trial": 1,
        "start_time": "2025-01-01T00:00:00",
        "end_time": "2025-01-01T00:00:01",
        "reward_info": {"reward": 1.0},
        "messages": [
            {"role": "user", "content": "hi", "turn_idx": 0, "timestamp": "2025-01-01T00:00:00"},
            {
                "role": "assistant",
                "content": None,
                "turn_idx": 1,
                "timestamp": None,
                "tool_calls": [{"id": "", "name": "lookup", "arguments": '{"q": 1}'}],
            },
            {
                "role": "tool",
                "id": "call-1-0",
                "content": "boom",
                "error": True,
                "turn_idx": 2,
                "timestamp": "2025-01-01T00:00:02Z",
            },
        ],
    }
    sim.update(over)
    return {"timestamp": "t", "info": {"agent_info": {}}, "simulations": [sim]}


def test_edge_cases_of_the_mapping() -> None:
    events = tau2_events(_sim())
    assert [e.type for e in events] == ["message", "message", "tool_result", "outcome"]
    assert events[0].agent.id == "tau2-agent"
    assert events[0].context is not None and events[0].context.task_id == "3"
    assert events[1].ts == events[0].ts  # missing timestamp inherits the previous one
    call = events[1].message.tool_calls[0] if events[1].message else None
    assert call is not None and (call.id, call.arguments) == ("call-1-0", {"q": 1})
    assert events[2].tool_result is not None and events[2].tool_result.name == "lookup"
    assert events[2].tool_result.error == "boom"
    # end_time is before the last (zoned) message: the outcome goes 1 ms after it
    assert (events[3].ts - events[2].ts).total_seconds() == pytest.approx(0.001)


@pytest.mark.parametrize(
    ("reward", "success", "clipped"),
    [(1.5, True, 1.0), (-0.5, False, 0.0), (0.99, False, 0.99), (1, True, 1.0)],
)
def test_reward_is_clipped_and_thresholded(reward: float, success: bool, clipped: float) -> None:
    out = tau2_events(_sim(reward_info={"reward": reward}))[-1].outcome
    assert out is not None and (out.success, out.reward) == (success, clipped)


def test_missing_reward_means_no_outcome() -> None:
    assert all(e.type != "outcome" for e in tau2_events(_sim(reward_info=None)))


def test_malformed_input_raises_replay_error(tmp_path: Path) -> None:
    bad_role = _sim()
    bad_role["simulations"][0]["messages"][0]["role"] = "robot"
    with pytest.raises(ReplayError, match="simulation #0: message #0: unknown role"):
        tau2_events(bad_role)
    with pytest.raises(ReplayError, match="not a tau2-bench results"):
        tau2_events({"simulations": []})
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ReplayError, match=r"broken\.json"):
        tau2_file_events(broken)
