"""A recorded conversation replayed late and slowly through the real worker (real broker, real
Postgres, the LLM judge on a loopback chat-completions server): its events are more than a year
old, so by event time it is idle from its first event on, while they arrive one every 1.5 s over
about a minute, with one pause longer than the arrival idle time half-way.

It is not judged while it arrives; it is judged in the pause on the events stored then, and
judged again once the rest has arrived: its verdicts are then those of the whole conversation
(every event judged: the judged count is the stored count), one per item and judge, none left
from the first judgement.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from monitor.contract.events import AgentEvent
from monitor.judges.base import Conversation
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.domains import load_domains
from monitor.judges.runner import JudgeRunner
from monitor.replay.tau2 import tau2_file_events
from monitor.sdk import EventEmitter
from tests.db import fetch
from tests.servers.llm_server import ChatServer, Recorded, Reply, verdicts_json
from tests.servers.worker import WorkerProcess, count, create_topic

ARRIVAL_IDLE_S = 5  # the arrival idle time of this worker (the default is 30 s)
PACE_S = 1.5  # an event every 1.5 s: never idle by arrival while it is delivered
EVENT_IDLE_S = 30  # the default: the events' timestamps are a year older than that


def answer(req: Recorded) -> Reply:
    text = req.body["messages"][-1]["content"]
    ids = sorted(set(re.findall(r"\[item ([^\]]+)\]", text)))
    return Reply(verdicts_json(*({"item_id": i} for i in ids)))


def longest_conversation(tau2_files: list[Path]) -> list[AgentEvent]:
    by_id: dict[str, list[AgentEvent]] = {}
    for e in tau2_file_events(tau2_files[0]):
        by_id.setdefault(e.conversation_id, []).append(e)
    return max(by_id.values(), key=len)


async def deliver(bootstrap: str, topic: str, events: list[AgentEvent]) -> None:
    """Each event sent and acknowledged, ``PACE_S`` apart."""
    async with EventEmitter(bootstrap, topic, idempotent=False) as emitter:
        for e in events:
            started = time.monotonic()
            await emitter.send(e)
            await emitter.flush()
            await asyncio.sleep(max(0.0, PACE_S - (time.monotonic() - started)))


async def request_of(url: str, cid: str) -> dict[str, Any] | None:
    rows = await fetch(
        url,
        "SELECT judged_at, judged_events, rejudges FROM judge_requests WHERE conversation_id = $1",
        cid,
    )
    return dict(rows[0]) if rows else None


async def until(probe: Any, timeout: float, log: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := await probe()):
        assert time.monotonic() < deadline, log
        await asyncio.sleep(0.2)
    return got


def whole_conversation_verdicts(events: list[AgentEvent]) -> set[tuple[Any, ...]]:
    """The deterministic verdicts on every event, as the worker's runner gives them."""
    runner = JudgeRunner(deterministic_judges(), None, load_domains(None))
    return {
        (v.judge, v.judge_version, v.item_id or "", v.status, v.label)
        for v in runner.deterministic(Conversation.of(events), set())
    }


@pytest.mark.slow  # about a minute of paced delivery
@pytest.mark.timeout(300)
async def test_a_conversation_replayed_late_and_slowly_is_judged_on_all_its_events(
    broker: Any, topic_name: str, database_url: str, tau2_files: list[Path], tmp_path: Path
) -> None:
    events = longest_conversation(tau2_files)
    cid, n = events[0].conversation_id, len(events)
    assert n >= 30 and events[-1].ts.year < 2026  # a year and more before today's clock
    half = n // 2
    await create_topic(broker.bootstrap, topic_name)
    await create_topic(broker.bootstrap, f"{topic_name}.judge")
    async with ChatServer(default=answer) as llm:
        env = {
            "MONITOR_ALERTING_ENABLED": "false",
            "MONITOR_JUDGE_IDLE_S": str(EVENT_IDLE_S),
            "MONITOR_JUDGE_ARRIVAL_IDLE_S": str(ARRIVAL_IDLE_S),
            "MONITOR_JUDGE_REJUDGE_GAP_S": "2",
            "MONITOR_LLM_JUDGE_BASE_URL": llm.base_url,
            "MONITOR_LLM_JUDGE_MODEL": "judge-m",
        }
        worker = WorkerProcess(broker.bootstrap, database_url, topic_name, tmp_path, **env)
        worker.start()
        try:
            await worker.wait_ready()
            started = time.monotonic()
            await deliver(broker.bootstrap, topic_name, events[:half])
            # idle by event time all along, never by arrival: not judged while it arrives
            assert await request_of(database_url, cid) is None, worker.log_tail()
            assert len(llm.requests) == 0

            async def first_judged() -> dict[str, Any] | None:
                row = await request_of(database_url, cid)
                return row if row and row["judged_at"] is not None else None

            first = await until(first_judged, 60, worker.log_tail())
            assert first["judged_events"] == half  # everything stored when it fell idle
            assert first["rejudges"] == 0
            pause = time.monotonic()
            await deliver(broker.bootstrap, topic_name, events[half:])
            delivered = time.monotonic()

            async def judged_whole() -> dict[str, Any] | None:
                row = await request_of(database_url, cid)
                done = row and row["judged_at"] is not None and row["judged_events"] == n
                return row if done else None

            last = await until(judged_whole, 90, worker.log_tail())
        finally:
            worker.stop()
    # delivered over about a minute, longer than the event-time idle threshold
    assert delivered - started > EVENT_IDLE_S, delivered - started
    assert pause - started > ARRIVAL_IDLE_S  # the pause straddled the arrival idle time
    stored = await count(
        database_url, f"SELECT count(*) FROM events WHERE conversation_id = '{cid}'"
    )
    assert stored == n == last["judged_events"]  # every event judged
    assert last["rejudges"] >= 1
    assert len(llm.requests) == 1 + last["rejudges"]
    # the LLM judge's last reading had every assistant message of the conversation
    final = llm.requests[-1].body["messages"][-1]["content"]
    assistant = {e.event_id for e in events if e.message and e.message.role == "assistant"}
    assert set(re.findall(r"\[item ([^\]]+)\]", final)) == assistant
    rows = await fetch(
        database_url,
        "SELECT judge, judge_version, item_id, status, label, created_at, evidence"
        " FROM verdicts WHERE conversation_id = $1",
        cid,
    )
    keys = [(r["judge"], r["judge_version"], r["item_id"]) for r in rows]
    assert len(keys) == len(set(keys))  # replaced, not duplicated
    assert min(r["created_at"] for r in rows) > first["judged_at"]  # nothing left from before
    deterministic = {
        (r["judge"], r["judge_version"], r["item_id"], r["status"], r["label"])
        for r in rows
        if r["judge"] != "llm"
    }
    assert deterministic == whole_conversation_verdicts(events)
    assert {r["item_id"] for r in rows if r["judge"] == "llm"} == assistant
    assert not any("truncated" in json.loads(r["evidence"]) for r in rows)  # under the cap
