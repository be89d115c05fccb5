"""Replay input: format detection, JSON Lines items with line errors, and the replay flow."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from monitor.contract.events import Agent, AgentEvent, MessagePayload, OutcomePayload
from monitor.core.errors import ReplayError
from monitor.replay.reader import (
    LineError,
    ReplayCounts,
    ReplayItem,
    iter_jsonl,
    open_source,
)
from monitor.replay.send import run_replay


def _counts(items: Iterable[ReplayItem]) -> ReplayCounts:
    counts = ReplayCounts()
    for item in items:
        counts.add(item)
    return counts


TS = datetime(2025, 1, 1, tzinfo=UTC)


def _message(n: int) -> AgentEvent:
    return AgentEvent(
        event_id=f"e{n}",
        type="message",
        ts=TS,
        conversation_id="c1",
        agent=Agent(id="a"),
        message=MessagePayload(role="assistant", content=f"m{n}", confidence=0.5),
    )


def _outcome(n: int) -> AgentEvent:
    return AgentEvent(
        event_id=f"o{n}",
        type="outcome",
        ts=TS,
        conversation_id="c1",
        agent=Agent(id="a"),
        outcome=OutcomePayload(success=True, source="ground_truth"),
    )


def _line(event: AgentEvent) -> str:
    return event.to_json().decode()


@pytest.fixture
def mixed_jsonl(tmp_path: Path) -> Path:
    bad_conf = json.loads(_line(_message(9)))
    bad_conf["message"]["confidence"] = 1.7
    lines = [
        _line(_message(1)),  # 1
        "",  # 2 blank
        "this is not json",  # 3
        _line(_outcome(1)),  # 4
        "   ",  # 5 blank
        json.dumps({"schema": "agent-event/v1"}),  # 6 missing event_id
        json.dumps(bad_conf),  # 7 out of range
        '{"schema": "agent-event/v1", "type": "nope"}',  # 8
        _line(_message(2)),  # 9
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_yields_events_and_errors_with_line_numbers(mixed_jsonl: Path) -> None:
    items = list(iter_jsonl(mixed_jsonl))
    errors = [i for i in items if isinstance(i, LineError)]
    events = [i for i in items if isinstance(i, AgentEvent)]
    assert [e.event_id for e in events] == ["e1", "o1", "e2"]
    assert [(e.line, e.reason, e.field) for e in errors] == [
        (3, "not_json", None),
        (6, "missing_field", "event_id"),
        (7, "out_of_range", "message.confidence"),
        (8, "unknown_type", "type"),
    ]
    assert errors[0].location == f"{mixed_jsonl}:3"
    assert str(errors[2]).startswith(f"{mixed_jsonl}:7: out_of_range: ")
    counts = _counts(items)
    assert counts.as_dict() == {
        "message": 2,
        "tool_result": 0,
        "escalation": 0,
        "outcome": 1,
        "feedback": 0,
        "gate": 0,
        "errors": 4,
    }
    assert counts.events == 3


def test_open_source_counts_nonblank_lines(mixed_jsonl: Path) -> None:
    source = open_source(mixed_jsonl)
    assert (source.format, source.total) == ("jsonl", 7)
    assert len(list(source)) == 7
    assert len(list(source)) == 7  # iterable more than once


def test_crlf_bom_and_invalid_utf8_lines(tmp_path: Path) -> None:
    path = tmp_path / "win.jsonl"
    path.write_bytes(
        b"\xef\xbb\xbf" + _message(1).to_json() + b"\r\n\xff\xfe{}\r\n" + _message(2).to_json()
    )
    items = list(iter(open_source(path)))
    assert isinstance(items[0], AgentEvent) and isinstance(items[2], AgentEvent)
    assert isinstance(items[1], LineError) and (items[1].line, items[1].reason) == (2, "not_json")


def test_detects_tau2_files(tau2_files: list[Path], tmp_path: Path) -> None:
    for path in tau2_files:
        assert open_source(path).format == "tau2"
        assert open_source(path).total == {"airline_gemini2_5_flash_10tasks_2t.json": 415}.get(
            path.name, 424
        )
    compact = tmp_path / "compact.json"  # a tau2 results file written on one line
    compact.write_text(json.dumps(json.loads(tau2_files[0].read_text())))
    assert open_source(compact).format == "tau2"
    assert _counts(open_source(compact)).as_dict()["outcome"] == 20


def test_detects_jsonl_whatever_the_suffix(tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_text(_line(_message(1)) + "\n" + _line(_message(2)) + "\n")
    assert open_source(path).format == "jsonl"
    broken_first = tmp_path / "broken.log"
    broken_first.write_text('{"schema": \n' + _line(_message(1)) + "\n")
    assert open_source(broken_first).format == "jsonl"
    assert [type(i) for i in iter(open_source(broken_first))] == [LineError, AgentEvent]
    empty = tmp_path / "empty.json"
    empty.write_text("\n\n")
    assert open_source(empty).format == "jsonl" and list(iter(open_source(empty))) == []
    garbage = tmp_path / "garbage.jsonl"  # the suffix wins: every line becomes an error
    garbage.write_text("hello\n")
    assert [i.reason for i in iter(open_source(garbage)) if isinstance(i, LineError)] == [
        "not_json"
    ]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"hello world\n", "unknown format"),
        (b"[1, 2,\n 3]\n", "JSON list is neither"),
        (b'{\n  "info": {}\n}\n', "JSON dict is neither"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
    ],
)
def test_unknown_files_raise(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "input.json"
    path.write_bytes(content)
    with pytest.raises(ReplayError, match=match):
        open_source(path)


def test_missing_file_or_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="no such file"):
        open_source(tmp_path / "missing.jsonl")
    with pytest.raises(ReplayError, match="is a directory"):
        open_source(tmp_path)


# --- the flow ---------------------------------------------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


async def test_flow_sends_in_order_and_collects_errors(mixed_jsonl: Path) -> None:
    sent: list[str] = []

    async def send(event: AgentEvent) -> None:
        sent.append(event.event_id)

    seen: list[ReplayItem] = []
    report = await run_replay(iter(open_source(mixed_jsonl)), send, on_item=seen.append)
    assert sent == ["e1", "o1", "e2"] and report.sent == 3
    assert [e.line for e in report.errors] == [3, 6, 7, 8]
    assert report.ok and report.aborted is None and len(seen) == 7
    assert report.counts.by_type == {"message": 2, "outcome": 1}


async def test_flow_strict_stops_at_first_bad_line(mixed_jsonl: Path) -> None:
    sent: list[str] = []

    async def send(event: AgentEvent) -> None:
        sent.append(event.event_id)

    report = await run_replay(iter(open_source(mixed_jsonl)), send, strict=True)
    assert sent == ["e1"]
    assert report.aborted is not None and report.aborted.line == 3 and not report.ok
    assert report.counts.errors == 1


async def test_flow_dry_run_counts_without_sending(mixed_jsonl: Path) -> None:
    report = await run_replay(iter(open_source(mixed_jsonl)), None)
    assert report.sent == 0 and report.counts.events == 3 and report.counts.errors == 4


async def test_flow_rate_limits_events_not_errors() -> None:
    clock = FakeTime()
    items: list[ReplayItem] = [
        _message(0),
        LineError("f", 2, "not_json", None, "x"),
        _message(1),
        _message(2),
        _message(3),
    ]
    report = await run_replay(items, None, rate=2.0, monotonic=clock.monotonic, sleep=clock.sleep)
    # event k is due k / rate seconds after the start; nothing else takes time here
    assert clock.sleeps == [0.5, 0.5, 0.5]
    assert report.elapsed_s == pytest.approx(1.5)
    with pytest.raises(ValueError, match="rate"):
        await run_replay(items, None, rate=0)


async def test_flow_propagates_send_failures() -> None:
    async def send(event: AgentEvent) -> None:
        raise ConnectionError("broker gone")

    with pytest.raises(ConnectionError, match="broker gone"):
        await run_replay([_message(0)], send)
