"""The SDK's gate(): async and blocking emitters against the real gate process (beside a worker)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from monitor.contract.events import validate_event
from monitor.sdk import (
    Agent,
    Context,
    EventEmitter,
    GateError,
    GateUnavailable,
    SyncEventEmitter,
    ToolCall,
)
from monitor.stack.ports import free_port
from tests.gate.test_decide import FAILED_CANCEL
from tests.gate.test_gate_endpoint import fetch, gate_worker
from tests.servers.worker import WorkerProcess

__all__ = ["gate_worker"]  # the fixture, shared with the endpoint tests


async def test_async_and_sync_emitters_ask_the_gate(
    gate_worker: WorkerProcess, database_url: str
) -> None:
    history = [validate_event(e) for e in FAILED_CANCEL]
    em = EventEmitter(
        "127.0.0.1:1",
        agent=Agent(id="agent-a"),
        context=Context(domain="retail"),
        gate_url=gate_worker.gate_url,
        gate_token="g4te",
    )
    try:  # no start(): the gate is HTTP, not Kafka
        ok = await em.gate("s-1", "Let me look that up.", confidence=0.95, request_id="sdk-1")
        assert ok.decision == "proceed" and ok.findings == () and ok.calibrated is False
        assert ok.threshold == 0.7 and ok.policy_version == "test-7" and ok.latency_ms > 0
        bad = await em.gate(
            "c1",
            "Your order W1 has been cancelled.",
            confidence=0.95,
            history=history,
            tool_calls=[ToolCall(id="k9", name="think", arguments={})],
            request_id="sdk-2",
        )
        assert bad.decision == "revise"
        assert {f.judge for f in bad.findings} == {"det.authorization", "det.ignored_error"}
        assert all(f.critique for f in bad.findings)
        low = await em.gate("s-2", "Done.", confidence=0.2)
        assert low.decision == "escalate" and low.decision_id is not None
        with pytest.raises(GateError) as refused:
            await em.gate("s-3", "Hi", confidence=0.9, agent=Agent(id="stranger"))
        assert (refused.value.status, refused.value.reason) == (404, "unknown_agent")
    finally:
        await em.close()

    sync = SyncEventEmitter(
        "127.0.0.1:1", agent=Agent(id="agent-a"), gate_url=gate_worker.gate_url, gate_token="g4te"
    )
    try:
        answer = await asyncio.to_thread(
            sync.gate, "s-4", "Sure.", confidence=0.9, request_id="sdk-4"
        )
        assert answer.decision == "proceed"
        with pytest.raises(GateError) as wrong:
            SyncEventEmitter(
                "x:1", agent=Agent(id="agent-a"), gate_url=gate_worker.gate_url, gate_token="nope"
            ).gate("s-5", "x", confidence=0.9)
        assert wrong.value.status == 401
    finally:
        sync.close()

    ids: set[Any] = set()
    for _ in range(80):  # each decision is stored as a gate event
        rows = await fetch(database_url, "SELECT event_id FROM events WHERE type = 'gate'")
        ids = {r["event_id"] for r in rows}
        if {"gate:sdk-1", "gate:sdk-2", "gate:sdk-4"} <= ids:
            break
        await asyncio.sleep(0.25)
    assert {"gate:sdk-1", "gate:sdk-2", "gate:sdk-4"} <= ids and len(ids) == 4


async def test_an_unreachable_gate_raises_gate_unavailable() -> None:
    em = EventEmitter(
        "127.0.0.1:1",
        agent=Agent(id="a"),
        gate_url=f"http://127.0.0.1:{free_port()}",
        gate_timeout_s=1,
    )
    try:
        with pytest.raises(GateUnavailable, match="unreachable"):
            await em.gate("c", "x", confidence=0.5)
    finally:
        await em.close()
    no_url = SyncEventEmitter("127.0.0.1:1", agent=Agent(id="a"))
    with pytest.raises(Exception, match="gate_url"):
        no_url.gate("c", "x", confidence=0.5)
