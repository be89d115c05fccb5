"""The traffic of ``monitor up``: simulated conversations, a few malformed events, and the wait
until the worker has written all of them to Postgres.

Contract:
- :func:`plan_traffic` picks how many simulated conversations make about ``duration_s * rate``
  events (at least one conversation, every conversation complete with its outcome). The
  simulated span ends at ``now`` at the latest: no event is stamped after it (simulated time
  never runs ahead of the wall clock); the drifting agent turns
  overconfident a third of the way through it and recovers at two thirds.
- :func:`send_traffic` sends ``malformed_events`` first (raw bytes, each breaking the contract
  in a different way, so the DLQ visibly fills and the worker visibly carries on), then the
  plan's events at ``rate`` events/s through the SDK emitter, and returns the replay report
  (valid events per type) once the broker acknowledged everything.
- Everything a run sends is recognisable: its conversations start with ``plan.prefix``, its
  malformed events contain ``plan.marker``; :attr:`TrafficPlan.scope` selects exactly them.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from monitor.replay.send import ReplayReport, run_replay
from monitor.sim.traffic import Simulator, default_agents
from monitor.stack.summary import Scope, Summary, ingested_counts, load_summary
from monitor.store.engine import make_engine

INTERVAL = timedelta(seconds=5)


@dataclass(frozen=True)
class TrafficPlan:
    simulator: Simulator
    conversations: int
    events: int  # exact number of valid events the plan sends
    change_point: datetime
    recovery_point: datetime

    @property
    def prefix(self) -> str:
        return f"sim-{self.simulator.run_id}-"

    @property
    def marker(self) -> bytes:
        return f"sim-{self.simulator.run_id}-bad".encode()

    @property
    def scope(self) -> Scope:
        return Scope(conversation_prefix=self.prefix, raw_marker=self.marker)


def plan_traffic(seed: int, duration_s: float, rate: float, now: datetime) -> TrafficPlan:
    """The plan for about ``duration_s * rate`` events (see the module docstring)."""
    target = max(1, round(duration_s * rate))
    probe = Simulator(seed, now, default_agents(None), interval=INTERVAL)
    conversations = events = 0
    last = now
    for conv in probe.conversations():  # sizes and timings depend on (seed, k), not on start
        conversations += 1
        events += len(conv)
        last = max(last, *(e.ts for e in conv))
        if events >= target:
            break
    start = (now - conversations * INTERVAL).replace(microsecond=0)
    while True:  # conversations last minutes: move back until the last event is not after now
        span = conversations * INTERVAL
        change_point = start + span / 3
        recovery_point = start + 2 * span / 3
        agents = default_agents(change_point, recovery_point)
        sim = Simulator(seed, start, agents, interval=INTERVAL)
        convs = list(sim.conversations(conversations))
        latest = max(conv[-1].ts for conv in convs)
        if latest <= now:
            sent = sum(len(conv) for conv in convs)
            return TrafficPlan(sim, conversations, sent, change_point, recovery_point)
        start -= timedelta(seconds=math.ceil((latest - now).total_seconds()))


def malformed_events(marker: bytes) -> list[tuple[str, bytes]]:
    """``(expected DLQ reason, raw value)`` pairs, each containing ``marker``."""
    tag = marker.decode()
    message = {"role": "assistant", "content": "Sure!", "confidence": 0.9}
    good = {
        "schema": "agent-event/v1",
        "type": "message",
        "ts": "2025-01-01T00:00:00Z",
        "conversation_id": tag,
        "agent": {"id": "sim-bad-agent"},
        "message": message,
    }

    def variant(n: int, **changes: object) -> bytes:
        body = {**good, "event_id": f"{tag}-{n}", **changes}
        return json.dumps({k: v for k, v in body.items() if v is not None}).encode()

    return [
        ("not_json", f'{{"conversation_id": "{tag}", "type": "message", '.encode()),
        ("out_of_range", variant(1, message={**message, "confidence": 1.7})),
        ("unknown_type", variant(2, type="thought", message=None, thought={"text": "hm"})),
        ("missing_field", variant(3, conversation_id=None)),
        ("invalid_value", variant(4, ts="2025-01-01T00:00:00")),  # no time zone
    ]


async def send_traffic(
    plan: TrafficPlan,
    bootstrap: str,
    topic: str,
    *,
    idempotent: bool,
    rate: float,
    on_event: Callable[[], None],
) -> tuple[ReplayReport, int]:
    """Send the malformed events, then the plan's events; return (report, malformed sent).

    Raises:
        monitor.sdk.EmitterError: the broker is unreachable or deliveries failed.
    """
    from aiokafka import AIOKafkaProducer

    from monitor.sdk import EventEmitter

    bad = malformed_events(plan.marker)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=idempotent
    )
    await producer.start()
    try:
        for _, raw in bad:
            await producer.send_and_wait(topic, raw, key=plan.marker)
    finally:
        await producer.stop()
    emitter = EventEmitter(bootstrap, topic, idempotent=idempotent)
    await emitter.start()
    try:
        report = await run_replay(
            plan.simulator.events(plan.conversations),
            emitter.send,
            rate=rate,
            on_item=lambda _item: on_event(),
        )
        await emitter.flush()
    finally:
        await emitter.close()
    return report, len(bad)


async def wait_until_stored(
    database_url: str,
    scope: Scope,
    expected: tuple[int, int],
    *,
    timeout_s: float = 60.0,
    alive: Callable[[], bool] = lambda: True,
    on_poll: Callable[[tuple[int, int]], None] = lambda _counts: None,
) -> tuple[tuple[int, int], Summary]:
    """Poll until ``(events, dead letters)`` within ``scope`` reach ``expected``, ``timeout_s``
    passes or ``alive()`` turns False; return the last counts and the summary of ``scope``."""
    db = make_engine(database_url, pool_size=1)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        while True:
            counts = await ingested_counts(db, scope)
            on_poll(counts)
            done = counts[0] >= expected[0] and counts[1] >= expected[1]
            if done or loop.time() > deadline or not alive():
                break
            await asyncio.sleep(0.5)
        return counts, await load_summary(db, scope)
    finally:
        await db.dispose()
