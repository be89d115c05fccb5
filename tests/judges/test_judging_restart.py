"""A worker killed while its LLM judge is busy: after a restart every conversation is judged,
no verdict is stored twice, and only the conversations in flight at the kill are asked again.

Real broker, real Postgres, the worker as a subprocess, the LLM judge on a loopback
chat-completions server that takes 0.4 s per answer.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.servers.llm_server import ChatServer, Recorded, Reply, verdicts_json
from tests.servers.worker import WorkerProcess, count, create_topic
from tests.worker.test_e2e_worker import expected_from_tau2, replay_cli

CONCURRENCY = 2


def answer(req: Recorded) -> Reply:
    text = req.body["messages"][-1]["content"]
    ids = sorted(set(re.findall(r"\[item ([^\]]+)\]", text)))
    return Reply(verdicts_json(*({"item_id": i} for i in ids)), delay=0.4)


def conversation_of(req: Recorded) -> str:
    ids = re.findall(r"\[item ([^\]]+)\]", req.body["messages"][-1]["content"])
    return ids[0].rsplit(":", 1)[0] if ids else "?"


async def judged(url: str) -> int:
    return await count(url, "SELECT count(*) FROM judge_requests WHERE judged_at IS NOT NULL")


@pytest.mark.slow  # a worker restart mid-judging (~40 s)
async def test_restart_mid_judging_judges_nothing_twice(
    broker, topic_name: str, database_url: str, tau2_files: list[Path], tmp_path: Path
):
    _, want_convs = expected_from_tau2(tau2_files)
    n = len(want_convs)
    await create_topic(broker.bootstrap, topic_name)
    async with ChatServer(default=answer) as server:
        env = {
            "MONITOR_LLM_JUDGE_BASE_URL": server.base_url,
            "MONITOR_LLM_JUDGE_MODEL": "judge-m",
            "MONITOR_LLM_JUDGE_API_KEY": "sk-test-0123456789",
            "MONITOR_JUDGE_CONCURRENCY": str(CONCURRENCY),
        }
        first = WorkerProcess(broker.bootstrap, database_url, topic_name, tmp_path, **env)
        first.start()
        try:
            await first.wait_ready()
            for path in tau2_files:
                assert replay_cli(path, broker.bootstrap, topic_name).returncode == 0
            for _ in range(600):
                if await judged(database_url) >= n // 4:
                    break
                await asyncio.sleep(0.1)
            before_kill = await judged(database_url)
            assert 0 < before_kill < n, "kill must happen mid-judging"
        finally:
            first.kill()
        second = WorkerProcess(broker.bootstrap, database_url, topic_name, tmp_path, **env)
        second.start()
        try:
            await second.wait_ready()
            for _ in range(1200):
                if await judged(database_url) >= n:
                    break
                await asyncio.sleep(0.1)
            assert await judged(database_url) == n, second.log_tail()
        finally:
            second.stop()
    # one LLM verdict set per conversation, never two
    llm_convs = await count(
        database_url, "SELECT count(DISTINCT conversation_id) FROM verdicts WHERE judge = 'llm'"
    )
    assert llm_convs == n
    dupes = await count(
        database_url,
        "SELECT count(*) FROM (SELECT conversation_id, item_id, judge FROM verdicts"
        " GROUP BY 1, 2, 3 HAVING count(*) > 1) d",
    )
    assert dupes == 0
    # asked again: only what was in flight when the first worker died
    asked = Counter(conversation_of(r) for r in server.requests)
    assert set(asked) == set(want_convs)
    twice = [c for c, k in asked.items() if k > 1]
    assert len(twice) <= CONCURRENCY, asked
