"""``monitor replay`` end to end: dry runs, bad lines, strict mode, and a real broker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from typer.testing import CliRunner

from monitor.cli.main import app
from monitor.contract.events import decode_event
from monitor.replay.tau2 import tau2_file_events
from monitor.stack.broker import EmbeddedBroker


@pytest.fixture
def bad_jsonl(tau2_files: list[Path], tmp_path: Path) -> Path:
    events = tau2_file_events(tau2_files[0])[:5]
    lines = [e.to_json().decode() for e in events]
    lines.insert(2, '{"schema": "agent-event/v1", "type": "message"}')  # line 3
    lines.insert(4, "")  # line 5 blank
    lines.append("{oops")  # line 8
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_dry_run_on_tau2_prints_counts_per_type(
    tau2_files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MONITOR_KAFKA_BOOTSTRAP", raising=False)
    result = CliRunner().invoke(app, ["replay", "--dry-run", str(tau2_files[1])])
    assert result.exit_code == 0, result.output
    rows = {
        cells[0]: cells[1]
        for line in result.stdout.splitlines()
        if len(cells := [c.strip() for c in line.strip("│┃ ").split("│")]) == 2
    }
    assert rows == {
        "message": "304",
        "tool_result": "88",
        "escalation": "12",
        "outcome": "20",
        "feedback": "0",
        "gate": "0",
        "events": "424",
        "invalid lines": "0",
    }


def test_dry_run_reports_bad_lines_and_continues(bad_jsonl: Path) -> None:
    result = CliRunner().invoke(app, ["replay", "--dry-run", str(bad_jsonl)])
    assert result.exit_code == 0, result.output
    assert f"{bad_jsonl}:3: missing_field:" in result.stderr
    assert f"{bad_jsonl}:8: not_json:" in result.stderr
    assert "skipped 2 invalid line(s)" in result.stdout
    assert "│ events        │     5 │" in result.stdout


def test_strict_aborts_with_exit_1(bad_jsonl: Path) -> None:
    result = CliRunner().invoke(app, ["replay", "--dry-run", "--strict", str(bad_jsonl)])
    assert result.exit_code == 1
    assert f"aborted at {bad_jsonl}:3 (--strict)" in result.stderr
    assert f"{bad_jsonl}:8" not in result.stderr
    assert "│ events        │     2 │" in result.stdout


def test_without_a_broker_it_says_how_to_get_one(
    bad_jsonl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MONITOR_KAFKA_BOOTSTRAP", raising=False)
    result = CliRunner().invoke(app, ["replay", str(bad_jsonl)])
    assert result.exit_code == 2
    assert "monitor up" in result.stderr and "MONITOR_KAFKA_BOOTSTRAP" in result.stderr


def test_unknown_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    result = CliRunner().invoke(app, ["replay", "--dry-run", str(path)])
    assert result.exit_code == 2
    assert "unknown format" in result.stderr


def test_a_directory_is_named_as_one(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["replay", "--dry-run", str(tmp_path)])
    assert result.exit_code == 2
    assert f"{tmp_path}: is a directory" in " ".join(result.stderr.split())
    assert "no such file" not in result.stderr


def test_every_line_invalid_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "all-bad.jsonl"
    path.write_text('{"schema": "agent-event/v1", "type": "message"}\n{oops\n')
    result = CliRunner().invoke(app, ["replay", "--dry-run", str(path)])
    assert result.exit_code == 1, result.output
    assert "every line (2) was invalid" in " ".join(result.stderr.split())


async def _consume(bootstrap: str, topic: str, expected: int) -> list[tuple[bytes, bytes]]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    got: list[tuple[bytes, bytes]] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while len(got) < expected and loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            got.extend((r.key, r.value) for recs in batch.values() for r in recs)
    finally:
        await consumer.stop()
    return got


def test_replay_sends_every_valid_event_to_kafka(
    broker: EmbeddedBroker,
    topic_name: str,
    bad_jsonl: Path,
    tau2_files: list[Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MONITOR_KAFKA_IDEMPOTENT", "false")
    runner = CliRunner()
    args = ["--bootstrap", broker.bootstrap, "--topic", topic_name]
    result = runner.invoke(app, ["replay", str(tau2_files[0]), *args])
    assert result.exit_code == 0, result.output
    assert f"sent 415 to {topic_name}@{broker.bootstrap}" in result.stdout
    result = runner.invoke(app, ["replay", str(bad_jsonl), "--rate", "200", *args])
    assert result.exit_code == 0, result.output

    records = asyncio.run(_consume(broker.bootstrap, topic_name, 420))
    assert len(records) == 420
    events = [decode_event(value) for _, value in records]
    assert all(
        key == e.conversation_id.encode() for (key, _), e in zip(records, events, strict=True)
    )
    want = {e.event_id for e in tau2_file_events(tau2_files[0])}
    assert {e.event_id for e in events} == want  # the 5 JSONL events are replays of the same ids
    # Kafka keeps each conversation in order: the tau2 replay, then the 5 replayed JSONL events
    order: dict[str, list[int]] = {}
    for e in events:
        order.setdefault(e.conversation_id, []).append(int(e.event_id.rsplit(":", 1)[1]))
    first = tau2_file_events(tau2_files[0])[0]
    for cid, positions in order.items():
        tail = [0, 1, 2, 3, 4] if cid == first.conversation_id else []
        assert positions == list(range(len(positions) - len(tail))) + tail
    assert json.loads(records[0][1])["schema"] == "agent-event/v1"


def test_simulate_sends_to_kafka(
    broker: EmbeddedBroker, topic_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONITOR_KAFKA_IDEMPOTENT", "false")
    monkeypatch.setenv("MONITOR_KAFKA_BOOTSTRAP", broker.bootstrap)  # taken from the settings
    args = ["simulate", "--seed", "9", "-n", "25", "--start", "2025-01-01T00:00:00Z"]
    result = CliRunner().invoke(app, [*args, "--topic", topic_name])
    assert result.exit_code == 0, result.output
    expected = tmp_path / "same.jsonl"
    assert CliRunner().invoke(app, [*args, "-o", str(expected)]).exit_code == 0
    want = expected.read_bytes().splitlines()
    records = asyncio.run(_consume(broker.bootstrap, topic_name, len(want)))
    assert sorted(value for _, value in records) == sorted(want)
