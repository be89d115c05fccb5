"""The judging pipeline on the real broker and Postgres, with the LLM judge on a loopback
chat-completions server: schedule -> judge-requests topic -> judges -> verdicts -> item labels.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from monitor.core.clock import FixedClock
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.llm import LLMJudge, LLMJudgeConfig
from monitor.judges.repo import JudgeRequest
from monitor.judges.worker import JudgeConfig, JudgeLoop, JudgeRunner
from monitor.sampling.policy import SamplingPolicy
from monitor.store.engine import libpq_url
from tests.db import fetch
from tests.factories import T0, event
from tests.judges.long_conversation import long_conversation
from tests.servers.llm_server import ChatServer, Recorded, Reply, verdicts_json
from tests.servers.worker import create_topic


def llm_answer(req: Recorded) -> Reply:
    """Label 0 every item whose id contains 'bad', 1 the others (what a real judge would say)."""
    text = req.body["messages"][-1]["content"]  # the conversation (not the rubric's example)
    ids = sorted(set(re.findall(r"\[item ([^\]]+)\]", text)))
    items = [
        {"item_id": i, "label": 0, "correctness": 0.1, "categories": ["wrong_information"]}
        if "bad" in i
        else {"item_id": i}
        for i in ids
    ]
    return Reply(verdicts_json(*items))


def conversations() -> list:
    evs = []
    # c-fab: claims a refund with no tool call (authorization fabrication), no outcome yet;
    # the agent calls tools in c-ok, so it is a tool-using agent and the check applies here
    evs += [
        event("fab-u", "c-fab", at=0, role="user", content="refund my order", confidence=None),
        event("fab-a1-bad", "c-fab", at=1, content="Your refund has been issued.", confidence=0.95),
    ]
    # c-ok: a plain exchange, outcome success (ground truth beats the judges)
    evs += [
        event("ok-u", "c-ok", at=2, role="user", content="where is my order?", confidence=None),
        event(
            "ok-a1",
            "c-ok",
            at=3,
            content="Let me check that for you.",
            confidence=0.7,
            tool_calls=[{"id": "k1", "name": "get_order", "arguments": {}}],
        ),
        event("ok-t1", "c-ok", "tool_result", at=3.5, call_id="k1", name="get_order"),
        event("ok-o", "c-ok", "outcome", at=4, success=True),
    ]
    # c-mix: two assistant messages, the LLM judges one wrong; no outcome
    evs += [
        event("mix-u", "c-mix", at=5, role="user", content="hello", confidence=None),
        event("mix-a1", "c-mix", at=6, content="Hello, how can I help?", confidence=0.8),
        event("mix-a2-bad", "c-mix", at=7, content="Our store closes at 9.", confidence=0.6),
    ]
    return evs


def judge_loop(
    bootstrap: str,
    database_url: str,
    topic: str,
    *,
    idle_s: float = 60,
    llm: LLMJudge | None = None,
    always_sample: Any = None,
    minutes: int = 10,
    arrival_idle_s: float = 0,
) -> JudgeLoop:
    """A judge loop on ``topic`` (its own group) with the deterministic judges and ``llm``, at
    ``minutes`` after the conversations' start (event time; the arrival of the events just
    written counts as idle after ``arrival_idle_s`` of real time)."""
    config = JudgeConfig(
        bootstrap,
        database_url,
        topic=topic,
        group_id=f"g-{topic}",
        idle_s=idle_s,
        arrival_idle_s=arrival_idle_s,
        idempotent_producer=False,
    )
    return JudgeLoop(
        config,
        JudgeRunner(deterministic_judges(), llm),
        always_sample or SamplingPolicy().always_sample,
        clock=FixedClock(T0 + timedelta(minutes=minutes)),
    )


@asynccontextmanager
async def consuming(loop: JudgeLoop) -> AsyncIterator[asyncio.Task[None]]:
    """``loop`` started, its consumer running and ready; on exit the loop is stopped, the
    consumer awaited and the loop closed."""
    await loop.start()
    ready = asyncio.Event()
    consumer = asyncio.create_task(loop.consume_forever(ready))
    try:
        await asyncio.wait_for(ready.wait(), 30)
        yield consumer
    finally:
        await loop.stop()
        await asyncio.wait_for(consumer, 30)
        await loop.close()


async def items(url: str) -> dict[str, tuple]:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        rows = await conn.fetch("SELECT event_id, label, label_source FROM items")
        return {r["event_id"]: (r["label"], r["label_source"]) for r in rows}
    finally:
        await conn.close()


async def test_judging_end_to_end(broker, database_url):
    topic = f"judge-{uuid.uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic)
    writer = EventWriter(database_url)
    await writer.write([event_row(e) for e in conversations()])
    async with ChatServer(default=llm_answer) as server:
        llm = LLMJudge(
            LLMJudgeConfig(base_url=server.base_url, model="judge-m", api_key="sk-test-0123456789")
        )
        # a judge labels items only where its precision is shown to clear the floor: here as
        # if measured on earlier outcomes (the worker's measurement below takes it back)
        det = next(j for j in deterministic_judges() if j.name == "det.authorization")
        await trust(database_url, [(llm.name, llm.version), (det.name, det.version)])
        loop = judge_loop(broker.bootstrap, database_url, topic, llm=llm)
        sunk: list[Any] = []  # what the OTLP evaluations export would send

        async def sink(verdicts: list[Any]) -> None:
            sunk.extend(verdicts)

        loop.verdict_sink = sink
        try:
            async with consuming(loop):
                assert await loop.schedule_once() == 3
                assert await loop.schedule_once() == 0  # requested once only
                await wait_for(lambda: judged(database_url), 3)
                stored = await fetch(database_url, "SELECT judge, item_id FROM verdicts")
                for _ in range(50):
                    if len(sunk) >= len(stored):
                        break
                    await asyncio.sleep(0.1)
                assert sorted((v.judge, v.item_id or "") for v in sunk) == sorted(
                    (r["judge"], r["item_id"]) for r in stored
                )
                n_llm = len(server.requests)
                assert n_llm == 3
                labels = await items(database_url)
                assert labels["fab-a1-bad"][0] == 0
                assert "det.authorization" in labels["fab-a1-bad"][1]
                assert labels["ok-a1"] == (1, "outcome:ground_truth")  # outcome beats the judges
                assert labels["mix-a1"] == (1, "judge:llm")
                assert labels["mix-a2-bad"][0] == 0
                verdicts = await fetch(
                    database_url,
                    "SELECT judge, item_id, status, label FROM "
                    "verdicts WHERE judge = 'det.authorization'",
                )
                assert [(v["item_id"], v["label"]) for v in verdicts] == [("fab-a1-bad", 0)]

                # a re-delivered request judges nothing again
                before = await fetch(database_url, "SELECT count(*) AS n FROM verdicts")
                await loop._producer.send_and_wait(  # type: ignore[union-attr]
                    topic,
                    b'{"conversation_id": "c-mix", "agent_id": "agent-a", "reasons": '
                    b'["rate"], "requested_at": "2026-01-01T00:00:00+00:00"}',
                    key=b"c-mix",
                )
                await asyncio.sleep(2)
                after = await fetch(database_url, "SELECT count(*) AS n FROM verdicts")
                assert after[0]["n"] == before[0]["n"]
                assert len(server.requests) == n_llm

                # late ground truth supersedes the judge labels; verdicts stay
                await writer.write(
                    [event_row(event("mix-o", "c-mix", "outcome", at=500, success=True))]
                )
                labels = await items(database_url)
                assert labels["mix-a2-bad"] == (1, "outcome:ground_truth")
                assert labels["mix-a1"] == (1, "outcome:ground_truth")
                kept = await fetch(database_url, "SELECT count(*) AS n FROM verdicts")
                assert kept[0]["n"] == before[0]["n"]
                bins = await fetch(
                    database_url,
                    "SELECT sum(count) AS n, sum(sum_y) AS y FROM "
                    "calibration_bins WHERE resolution = '1d'",
                )
                # 4 labelled items: fab (0), ok (1), mix-a1 (1), mix-a2 (1)
                assert (bins[0]["n"], bins[0]["y"]) == (4, 3.0)
                # the worker's judge measurement: no judge has a flag with an outcome to show
                # its precision, so none labels; c-fab (no outcome) loses its judge label
                changes = await loop.refresh_quality()
                assert sorted((c.judge, c.muted) for c in changes) == [
                    ("det.authorization", True),
                    ("llm", True),
                ]
                measured = await fetch(
                    database_url,
                    "SELECT judge, pairs, labels FROM judge_quality WHERE agent_id = ''"
                    " ORDER BY judge",
                )
                assert measured and not any(r["labels"] for r in measured)
                labels = await items(database_url)
                assert labels["fab-a1-bad"] == (None, None)
                assert await loop.refresh_quality() == []
        finally:
            await writer.close()


async def trust(url: str, judges: list[tuple[str, str]]) -> None:
    """Pooled ``judge_quality`` rows that let ``judges`` (name, version) label every scope."""
    conn = await asyncpg.connect(libpq_url(url))
    try:
        await conn.executemany(
            "INSERT INTO judge_quality (judge, judge_version, agent_id, domain, pairs, flagged,"
            " floor, min_pairs, decided_by, labels) VALUES ($1, $2, '', '', 0, 0, 0.7, 30,"
            " 'pooled', true)",
            judges,
        )
    finally:
        await conn.close()


async def judged(url: str) -> int:
    rows = await fetch(url, "SELECT count(*) AS n FROM judge_requests WHERE judged_at IS NOT NULL")
    return int(rows[0]["n"])


async def wait_for(probe, want: int, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (got := await probe()) < want:
        assert asyncio.get_running_loop().time() < deadline, f"{got} < {want}"
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("idle_minutes,expected", [(0, 3), (60, 0)])
async def test_schedule_waits_for_idle_conversations(broker, database_url, idle_minutes, expected):
    writer = EventWriter(database_url)
    await writer.write([event_row(e) for e in conversations()])
    await writer.close()
    topic = f"j-{uuid.uuid4().hex[:8]}"
    loop = judge_loop(broker.bootstrap, database_url, topic, idle_s=idle_minutes * 60, minutes=30)
    await loop.start()
    try:
        assert await loop.schedule_once() == expected
    finally:
        await loop.close()
    _ = datetime.now(UTC)


async def test_schedule_picks_rule_candidates_only_and_marks_them(broker, database_url):
    """Rate 0: only conversations an always-sample rule pulls in are sent to the judges (here
    a confidence floor of 0.75: c-fab's 0.95 is above it, c-ok 0.7 and c-mix 0.6 below), each
    marked requested so that the next round skips it."""
    policy = SamplingPolicy.from_mapping(
        {"default_rate": 0.0, "always_sample": {"confidence_floor": 0.75}}
    )
    writer = EventWriter(database_url, policy=policy)
    await writer.write([event_row(e) for e in conversations()])
    await writer.close()
    topic = f"j-{uuid.uuid4().hex[:8]}"
    loop = judge_loop(
        broker.bootstrap, database_url, topic, always_sample=policy.always_sample, minutes=30
    )
    await loop.start()
    try:
        assert await loop.schedule_once() == 2
        assert await loop.schedule_once() == 0
    finally:
        await loop.close()
    rows = await fetch(
        database_url,
        "SELECT conversation_id, judge_requested_at IS NOT NULL AS m FROM conversations ORDER BY 1",
    )
    assert [(r["conversation_id"], r["m"]) for r in rows] == [
        ("c-fab", False),
        ("c-mix", True),
        ("c-ok", True),
    ]
    reasons = await fetch(database_url, "SELECT reasons FROM judge_requests")
    assert all('"low_confidence"' in r["reasons"] for r in reasons), reasons


async def test_an_undecodable_request_batch_and_a_malformed_request_are_skipped(
    broker, database_url
):
    """A corrupt record batch and a record that is no request sit before the real requests:
    both are skipped and counted, and the requests after them are judged."""
    from aiokafka import AIOKafkaProducer

    from tests.kafka_raw import Raw, record_batch

    topic = f"judge-{uuid.uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"not a judge request", partition=0)
    finally:
        await producer.stop()
    async with Raw(broker.bootstrap, topic) as raw:
        await raw.produce(record_batch([b'{"conversation_id": "x"}'], "lz4", "crc"), partition=0)
    writer = EventWriter(database_url)
    await writer.write([event_row(e) for e in conversations()])
    loop = judge_loop(broker.bootstrap, database_url, topic)
    try:
        async with consuming(loop) as consumer:
            assert await loop.schedule_once() == 3
            await wait_for(lambda: judged(database_url), 3)
            assert not consumer.done()
            text = loop.metrics.render().decode()
            for reason in ("malformed", "undecodable_batch"):
                line = f'monitor_judge_requests_skipped_total{{reason="{reason}"}} 1.0'
                assert line in text, text
    finally:
        await writer.close()


async def test_requests_lost_on_the_topic_are_sent_again_and_judged(broker, database_url):
    """Requests published where no judge reads them are lost: an hour after they were sent
    the scheduler publishes them again, the judges store their verdicts, and a judged
    request is never sent again."""
    writer = EventWriter(database_url)
    await writer.write([event_row(e) for e in conversations()])
    await writer.close()
    nowhere, topic = f"lost-{uuid.uuid4().hex[:8]}", f"judge-{uuid.uuid4().hex[:8]}"
    for t in (nowhere, topic):
        await create_topic(broker.bootstrap, t)
    lost = judge_loop(broker.bootstrap, database_url, nowhere, minutes=10)
    await lost.start()
    try:
        assert await lost.schedule_once() == 3
    finally:
        await lost.close()
    early = judge_loop(broker.bootstrap, database_url, topic, minutes=40)
    await early.start()
    try:
        assert await early.schedule_once() == 0  # 30 min: maybe still queued, not lost
    finally:
        await early.close()
    later = judge_loop(broker.bootstrap, database_url, topic, minutes=75)
    async with consuming(later):
        assert await later.schedule_once() == 3
        await wait_for(lambda: judged(database_url), 3)
        text = later.metrics.render().decode()
        assert "monitor_judge_requests_resent_total 3.0" in text, text
    rows = await fetch(database_url, "SELECT resends FROM judge_requests")
    assert [r["resends"] for r in rows] == [1, 1, 1]
    flagged = await fetch(
        database_url, "SELECT item_id, label FROM verdicts WHERE judge = 'det.authorization'"
    )
    assert [(r["item_id"], r["label"]) for r in flagged] == [("fab-a1-bad", 0)]
    again = judge_loop(broker.bootstrap, database_url, topic, minutes=200)
    await again.start()
    try:
        assert await again.schedule_once() == 0
    finally:
        await again.close()


async def test_a_lost_request_is_sent_again_a_bounded_number_of_times(broker, database_url):
    """With no judge reading at all, each request is sent again at most ``resend_most`` times
    (an hour apart), and not after a day."""
    writer = EventWriter(database_url)
    await writer.write([event_row(e) for e in conversations()])
    await writer.close()
    topic = f"lost-{uuid.uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic)
    sent = []
    for minutes in (10, 75, 100, 140, 205, 270):
        loop = judge_loop(broker.bootstrap, database_url, topic, minutes=minutes)
        await loop.start()
        try:
            sent.append(await loop.schedule_once())
        finally:
            await loop.close()
    # 10: first requests; 75: an hour later; 100: resent 25 min ago; 140: the second resend;
    # then the bound (JudgeConfig.resend_most = 2)
    assert sent == [3, 3, 0, 3, 0, 0]
    rows = await fetch(database_url, "SELECT resends FROM judge_requests")
    assert [r["resends"] for r in rows] == [2, 2, 2]


def corrected_answer(req: Recorded) -> Reply:
    """The LLM judge's view: an answer the user later says was wrong is wrong (label 0), every
    other item right; the judge can only know it when it reads the correction."""
    text = req.body["messages"][-1]["content"]
    ids = sorted(set(re.findall(r"\[item ([^\]]+)\]", text)))
    corrected = "that was wrong" in text.lower()
    items = [
        {"item_id": i, "label": 0, "correctness": 0.1, "categories": ["wrong_information"]}
        if corrected and i == "g-a1"
        else {"item_id": i}
        for i in ids
    ]
    return Reply(verdicts_json(*items))


async def test_a_conversation_that_grew_after_it_was_judged_is_judged_again(broker, database_url):
    """Judged on its first two events; two more arrive (the user corrects the agent): the
    scheduler sends it again, every judge runs on the four events, its verdicts are replaced
    (one per item and judge, none left from the first judgement), its items relabelled and the
    calibration sums moved, not added; a request delivered again changes nothing, and beyond
    ``rejudge_most`` it is no longer judged again."""
    topic = f"judge-{uuid.uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic)
    first = [
        event("g-u1", "c-grow", at=0, role="user", content="when do you close?", confidence=None),
        event("g-a1", "c-grow", at=1, content="We close at 9 tonight.", confidence=0.8),
    ]
    more = [
        event("g-u2", "c-grow", at=20, role="user", content="That was wrong: 8.", confidence=None),
        event("g-a2", "c-grow", at=21, content="Sorry, we close at 8.", confidence=0.7),
    ]
    writer = EventWriter(database_url)
    await writer.write([event_row(e) for e in first])
    async with ChatServer(default=corrected_answer) as server:
        llm = LLMJudge(LLMJudgeConfig(base_url=server.base_url, model="judge-m"))
        await trust(database_url, [(llm.name, llm.version)])  # its labels count
        loop = judge_loop(broker.bootstrap, database_url, topic, llm=llm)
        loop.config = replace(loop.config, rejudge_most=1, rejudge_gap_s=0)
        try:
            async with consuming(loop):
                assert await loop.schedule_once() == 1
                await wait_for(lambda: judged(database_url), 1)
                assert await items(database_url) == {"g-a1": (1, "judge:llm")}
                assert await loop.schedule_once() == 0  # judged on every stored event
                await writer.write([event_row(e) for e in more])
                assert await loop.schedule_once() == 1  # grew: sent again
                assert await loop.schedule_once() == 0  # pending: not twice
                await wait_for(lambda: judged(database_url), 1)
                assert len(server.requests) == 2
                assert "That was wrong" in server.requests[-1].body["messages"][-1]["content"]
                verdicts = await fetch(
                    database_url,
                    "SELECT item_id, label FROM verdicts WHERE judge = 'llm' ORDER BY item_id",
                )
                assert [(v["item_id"], v["label"]) for v in verdicts] == [("g-a1", 0), ("g-a2", 1)]
                dupes = await fetch(
                    database_url,
                    "SELECT count(*) AS n FROM (SELECT 1 FROM verdicts"
                    " GROUP BY item_id, judge, judge_version HAVING count(*) > 1) d",
                )
                assert dupes[0]["n"] == 0
                assert await items(database_url) == {
                    "g-a1": (0, "judge:llm"),
                    "g-a2": (1, "judge:llm"),
                }
                bins = await fetch(
                    database_url,
                    "SELECT sum(count) AS n, sum(sum_y) AS y FROM calibration_bins"
                    " WHERE resolution = '1d'",
                )
                assert (bins[0]["n"], bins[0]["y"]) == (2, 1.0)  # a1 moved 1 -> 0, a2 added
                request = await fetch(
                    database_url,
                    "SELECT r.judged_events, r.rejudges, c.event_count, c.judge_watch"
                    " FROM judge_requests r JOIN conversations c USING (conversation_id)",
                )
                assert dict(request[0]) == {
                    "judged_events": 4,
                    "rejudges": 1,
                    "event_count": 4,
                    "judge_watch": None,  # rejudge_most = 1: spent
                }
                text = loop.metrics.render().decode()
                assert "monitor_judge_rejudges_total 1.0" in text, text

                # the same request delivered again: the verdicts cover every event, nothing runs
                again = JudgeRequest("c-grow", "agent-a", ("rate",), T0, rejudge=1)
                await loop._producer.send_and_wait(  # type: ignore[union-attr]
                    topic, again.to_json(), key=b"c-grow"
                )
                await asyncio.sleep(2)
                assert len(server.requests) == 2
                # grows again beyond the bound: its last verdicts stay
                await writer.write(
                    [event_row(event("g-u3", "c-grow", at=40, role="user", content="ok"))]
                )
                assert await loop.schedule_once() == 0
        finally:
            await writer.close()


async def test_a_capped_conversation_judged_again_states_what_the_cap_left_out_of_all_of_it(
    broker, database_url
):
    """Above the cap (10 events) when first judged (24 stored) and again after it grew to 60:
    every verdict of the second judgement states the cap over the 60 events, the gap between
    its kept events exactly, and none is left from the first."""
    events = long_conversation(60, "c-capped")
    topic = f"judge-{uuid.uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic)
    writer = EventWriter(database_url)
    await writer.write([event_row(e) for e in events[:24]])
    loop = judge_loop(broker.bootstrap, database_url, topic, minutes=24 * 60)
    loop.config = replace(loop.config, max_events=10, rejudge_gap_s=0)
    try:
        async with consuming(loop):
            assert await loop.schedule_once() == 1
            await wait_for(lambda: judged(database_url), 1)
            await writer.write([event_row(e) for e in events[24:]])
            assert await loop.schedule_once() == 1
            await wait_for(lambda: judged(database_url), 1)
    finally:
        await writer.close()
    rows = await fetch(
        database_url, "SELECT item_id, evidence FROM verdicts WHERE conversation_id = 'c-capped'"
    )
    caps = [json.loads(r["evidence"])["truncated"] for r in rows]
    assert caps and all(c == caps[0] for c in caps)
    kept = {e.event_id for e in events[:5] + events[-5:]}
    assert {r["item_id"] for r in rows} - {""} <= kept  # nothing judged from the gap
    gap = events[5:-5]
    assert caps[0]["events"] == 60 and (caps[0]["judged"], caps[0]["omitted"]) == (10, 50)
    assert (caps[0]["omitted_after"], caps[0]["resume_at"]) == (
        events[4].event_id,
        events[-5].event_id,
    )
    assert caps[0]["omitted_by_type"] == dict(Counter(e.type for e in gap))
    results = [e.tool_result for e in gap if e.tool_result is not None]
    assert caps[0]["omitted_tool_results"]["failed"] == sum(not r.ok for r in results)
    request = await fetch(database_url, "SELECT judged_events, rejudges FROM judge_requests")
    assert dict(request[0]) == {"judged_events": 60, "rejudges": 1}
