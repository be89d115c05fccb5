"""Through the real gate process (beside a worker): a newly fitted map is used at once (not
after MONITOR_GATE_REFRESH_S, set to an hour here), and a rule's inline LLM check is awaited
without blocking the event loop (the loopback chat-completions server answers, hangs, and
deterministic answers go on)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from monitor.analytics.recalibration import IsotonicMap, RecalibrationResult
from monitor.analytics.write import save_map
from monitor.store.engine import make_engine
from tests.factories import T0
from tests.servers.llm_server import ChatServer, Hang, Reply, verdicts_json
from tests.servers.worker import WorkerProcess, running_gate_worker

POLICY = """\
version: "wp-1"
rules:
  - agent: llm-bot
    threshold: 0.3
    checks: [det.authorization, llm]
    llm_timeout_ms: 1500
    on_llm_timeout: escalate
    deadline_ms: 10000
  - agent: agent-a
    threshold: 0.7
    deadline_ms: 10000
"""


@pytest.fixture
async def llm_server() -> Any:
    async with ChatServer() as server:
        yield server


@pytest.fixture
async def worker(
    broker: Any, topic_name: str, database_url: str, tmp_path: Path, llm_server: ChatServer
) -> Any:
    async with running_gate_worker(
        broker.bootstrap,
        database_url,
        topic_name,
        tmp_path,
        POLICY,
        MONITOR_GATE_REFRESH_S="3600",
        MONITOR_LLM_JUDGE_BASE_URL=llm_server.base_url,
        MONITOR_LLM_JUDGE_MODEL="gate-model",
    ) as proc:
        yield proc


def ask(agent: str, request_id: str, confidence: float = 0.75) -> dict[str, Any]:
    return {
        "conversation_id": f"c-{request_id}",
        "agent": {"id": agent},
        "domain": "retail",
        "content": "Your refund was issued.",
        "confidence": confidence,
        "request_id": request_id,
    }


async def test_a_new_map_is_used_at_once(worker: WorkerProcess, database_url: str) -> None:
    url = f"{worker.gate_url}/v1/gate"
    async with httpx.AsyncClient(timeout=30) as client:
        before = (await client.post(url, json=ask("agent-a", "m0"))).json()
        assert (before["decision"], before["calibrated"]) == ("proceed", False)
        engine = make_engine(database_url)
        try:  # a map taking 0.75 to 0.5, below the threshold 0.7
            fitted = RecalibrationResult(
                IsotonicMap((0.0, 1.0), (0.0, 2 / 3)), 8, 2, 0.1, 0.05, 0.2, 0.1, 0, 0.3, 10
            )
            await save_map(engine, "agent-a", "retail", fitted, T0, T0)
        finally:
            await engine.dispose()
        saved = time.monotonic()
        for i in range(100):  # the version check runs every second; the period is an hour
            after = (await client.post(url, json=ask("agent-a", f"m{i + 1}"))).json()
            if after["calibrated"]:
                break
            await asyncio.sleep(0.1)
        waited = time.monotonic() - saved
    assert after["calibrated"] is True and after["map_version"] == 1, after
    assert after["calibrated_confidence"] == pytest.approx(0.5)
    assert after["decision"] == "escalate"
    assert waited < 10.0  # MONITOR_GATE_REFRESH_S is 3600


async def test_the_llm_check_is_awaited_without_blocking_other_answers(
    worker: WorkerProcess, llm_server: ChatServer
) -> None:
    url = f"{worker.gate_url}/v1/gate"
    llm_server.push(
        Reply(
            verdicts_json(
                {
                    "item_id": "gate:l1:message",
                    "label": 0,
                    "categories": ["fabrication"],
                    "rationale": "no refund tool call",
                }
            )
        ),
        Hang(5.0),
    )
    async with httpx.AsyncClient(timeout=30) as client:
        fired = (await client.post(url, json=ask("llm-bot", "l1"))).json()
        assert fired["decision"] == "revise" and fired["degraded"] is None
        assert [f["judge"] for f in fired["findings"]] == ["llm"]
        assert fired["findings"][0]["critique"] == "no refund tool call"

        slow = asyncio.ensure_future(client.post(url, json=ask("llm-bot", "l2")))
        for _ in range(200):  # the LLM server holds the second request
            if llm_server.in_flight:
                break
            await asyncio.sleep(0.02)
        assert llm_server.in_flight == 1
        other = (await client.post(url, json=ask("agent-a", "d1", 0.9))).json()
        assert other["decision"] == "proceed" and not slow.done()  # answered meanwhile
        timed_out = (await slow).json()
    assert timed_out["decision"] == "escalate"
    assert timed_out["degraded"].startswith("llm timeout after ")
    assert timed_out["degraded"].endswith("(budget 1500 ms): on_llm_timeout escalate")
    assert len(llm_server.requests) == 2 and np.isclose(timed_out["threshold"], 0.3)
