"""The SDK's producer cost: ``EventEmitter`` against ``AIOKafkaProducer.send`` per event.

Both send the same N simulated events (serialized with ``AgentEvent.to_json``, keyed by the
conversation id, ``acks="all"``, ``linger_ms=20``, 256 KiB batches) to a fresh 4-partition topic
of the embedded Tansu broker and flush; the baseline is what the emitter did before it kept
batches of its own (``await producer.send(...)`` per event, a future per event), measured in
the same run. Prints the CPU seconds of this process and the wall time per run, alternating the
two, and the ratio of the medians (baseline CPU / emitter CPU: how many times cheaper)::

    .venv/bin/python bench/sdk_produce.py                 # 50,000 events, 3 repeats
    .venv/bin/python bench/sdk_produce.py --events 10000 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from aiokafka import AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.harness import scratch_topic
from monitor.contract.events import AgentEvent
from monitor.sdk import EventEmitter
from monitor.sim.traffic import Simulator
from monitor.stack.broker import EmbeddedBroker

PARTITIONS = 4


async def with_send(bootstrap: str, topic: str, events: Sequence[AgentEvent]) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=20, max_batch_size=256 * 1024
    )
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value=e.to_json(), key=e.conversation_id.encode())
            for e in events
        ]
        await producer.flush()
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def with_emitter(bootstrap: str, topic: str, events: Sequence[AgentEvent]) -> None:
    async with EventEmitter(bootstrap, topic, idempotent=False) as emitter:
        for event in events:
            await emitter.send(event)
        await emitter.flush()


async def bench(bootstrap: str, events: Sequence[AgentEvent], repeat: int) -> dict[str, list]:
    results: dict[str, list[tuple[float, float]]] = {"send": [], "emitter": []}
    for i in range(1, repeat + 1):
        for name, run in (("send", with_send), ("emitter", with_emitter)):
            async with scratch_topic(bootstrap, name, PARTITIONS) as topic:
                cpu0, t0 = time.process_time(), time.perf_counter()
                await run(bootstrap, topic, events)
                cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
            results[name].append((cpu, wall))
            print(
                f"repeat {i}/{repeat} {name:8}: CPU {cpu:.2f} s, wall {wall:.2f} s, "
                f"{len(events) / wall:,.0f} events/s",
                flush=True,
            )
    return results


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=50_000, help="events per run (50,000)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each producer (3)")
    args = p.parse_args(argv)
    sim = Simulator(7, datetime(2025, 1, 1, tzinfo=UTC))
    events = list(itertools.islice(sim.events(None), args.events))
    with (
        tempfile.TemporaryDirectory(prefix="bench-sdk-") as work,
        EmbeddedBroker(log_path=Path(work) / "tansu.log") as broker,
    ):
        results = asyncio.run(bench(broker.bootstrap, events, args.repeat))
    med = {
        k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
        for k, v in results.items()
    }
    n = args.events
    print("\n| producer | CPU s (median) | µs CPU per event | wall s | events/s |")
    print("|---|---|---|---|---|")
    for name, label in (
        ("send", "AIOKafkaProducer.send per event (baseline)"),
        ("emitter", "EventEmitter (own batches)"),
    ):
        cpu, wall = med[name]
        print(f"| {label} | {cpu:.2f} | {cpu / n * 1e6:.1f} | {wall:.2f} | {n / wall:,.0f} |")
    print(f"\nbaseline CPU / emitter CPU = {med['send'][0] / med['emitter'][0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
