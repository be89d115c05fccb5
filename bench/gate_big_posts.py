"""The gate process's p99 alone and while three 6 MB batches are posted to the worker.

A real worker (``monitor worker``, judges and alerting off) and a real gate process (``monitor
gate serve``) run on one broker, topic and database. The worker answers ``/v1/gate`` with 404
(``gate_elsewhere``; checked first): its route was removed because it stalled behind exactly
this load (docs/gate.md; the figures of the route, measured with this bench at the commit that
added it, are in docs/benchmarks.md). The probe is ``bench/gate_client.py`` (bench/gate.py's
open-loop client, a process and session of its own): ``--rate`` gate requests/s for
``--seconds``, each request the 5-event conversation of bench/gate.py (the inline checks
run), latency measured from the scheduled send time (a stall counts in every request it
delayed).

Per ``--pairs`` pair: **alone** (after
the worker and gate went quiet: ``bench.gate.settle``), then **loaded**: the same open loop,
and one second into it three batches of 10,000 events (~6.3 MB of JSON each, 500-character
messages, event ids new in every phase) are posted to the worker's ``POST /v1/events`` at once.
A loaded phase proves its load: each post must be answered 202 with 10,000 accepted before the
open loop ends, and the worker must have stored the 30,000 events (``SELECT count(*)``; the
seconds from the first post until all are stored are printed, with whether that was still
inside the phase); a phase where a post was not accepted in time is flagged **NOT VALID**.
Printed: p50/p99/max per phase, the p99 ratio loaded / alone per pair and its median (the
goal: <= 1.5).

Run from the repository root (~2 minutes with 2 pairs)::

    .venv/bin/python bench/gate_big_posts.py
    .venv/bin/python bench/gate_big_posts.py --pairs 1 --seconds 8
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiokafka import AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench import harness
from bench.gate import TOKEN, Bodies, Client, settle
from bench.harness import Worker, running, scratch_database, scratch_topic

BATCHES = 3
EVENTS_PER_BATCH = 10_000
POST_AT_S = 1.0  # into the open loop


def batch(phase: str, n: int) -> bytes:
    """Batch ``n`` of ``phase``: 10,000 assistant messages of 500 characters in 50
    conversations, ids unique to the phase (each is stored, none skipped as a duplicate)."""
    return json.dumps(batch_events(phase, n)).encode()


def batch_events(phase: str, n: int) -> list[dict[str, Any]]:
    return [
        {
            "schema": "agent-event/v1",
            "event_id": f"{phase}-{n}-{i}",
            "type": "message",
            "ts": f"2026-01-01T00:{(i // 60) % 60:02d}:{i % 60:02d}+00:00",
            "conversation_id": f"{phase}-{n}-c{i % 50}",
            "agent": {"id": "bench-load"},
            "message": {"role": "assistant", "content": "y" * 500, "confidence": 0.8},
        }
        for i in range(EVENTS_PER_BATCH)
    ]


async def stored(db_url: str, phase: str) -> int:
    conn = await asyncpg.connect(db_url)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM events WHERE conversation_id LIKE $1", f"{phase}-%"
            )
        )
    finally:
        await conn.close()


async def produce_batches(
    bootstrap: str, topic: str, phase: str
) -> tuple[list[tuple[int, int]], float]:
    """``--via kafka``: the same 30,000 events produced straight to the worker's topic (no
    HTTP body to parse): (202, 10,000) per batch once the broker acknowledged it."""
    batches = [[json.dumps(e).encode() for e in batch_events(phase, n)] for n in range(BATCHES)]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=-1)
    await producer.start()
    try:
        await asyncio.sleep(POST_AT_S)
        t0 = time.perf_counter()
        for records in batches:
            for record in records:
                await producer.send(topic, record, key=record[-40:])
        await producer.flush()
        return [(202, EVENTS_PER_BATCH)] * BATCHES, time.perf_counter() - t0
    finally:
        await producer.stop()


async def post_batches(worker: Worker, phase: str) -> tuple[list[tuple[int, int]], float]:
    """The three batches of ``phase`` posted at once: (status, accepted) per post and the
    seconds until the last answer."""
    bodies = [batch(phase, n) for n in range(BATCHES)]
    url = f"http://127.0.0.1:{worker.port}/v1/events"
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def one(body: bytes) -> tuple[int, int]:
            async with session.post(url, data=body, headers=headers) as r:
                answer = await r.json()
                return r.status, int(answer.get("accepted", 0))

        await asyncio.sleep(POST_AT_S)
        t0 = time.perf_counter()
        answers = await asyncio.gather(*(one(b) for b in bodies))
        return list(answers), time.perf_counter() - t0


async def until_stored(db_url: str, phase: str, want: int, timeout_s: float = 180.0) -> float:
    """Seconds until ``want`` events of ``phase`` are stored (polled every 0.2 s)."""
    t0 = time.perf_counter()
    while await stored(db_url, phase) < want:
        if time.perf_counter() - t0 > timeout_s:
            return float("inf")
        await asyncio.sleep(0.2)
    return time.perf_counter() - t0


async def phase(
    client: Client, url: str, args: argparse.Namespace, pids: tuple[int, ...], db_url: str
) -> dict[str, Any]:
    await settle(db_url, pids)
    return await client.open_loop(url, args.rate, args.seconds, conversations=20)


async def loaded_phase(
    client: Client,
    url: str,
    args: argparse.Namespace,
    worker: Worker,
    pids: tuple[int, ...],
    db_url: str,
    name: str,
) -> dict[str, Any]:
    await settle(db_url, pids)
    t0 = time.perf_counter()
    probe = asyncio.ensure_future(client.open_loop(url, args.rate, args.seconds, conversations=20))
    if args.via == "kafka":
        posts, posted_s = await produce_batches(
            worker.env["MONITOR_KAFKA_BOOTSTRAP"], worker.env["MONITOR_TOPIC_EVENTS"], name
        )
    else:
        posts, posted_s = await post_batches(worker, name)
    store_s = await until_stored(db_url, name, BATCHES * EVENTS_PER_BATCH)
    f = await probe
    f["posts"], f["posted_s"] = posts, posted_s
    f["stored_s"] = store_s + posted_s  # from the first post
    in_phase = POST_AT_S + posted_s <= args.seconds
    f["valid"] = in_phase and all(p == (202, EVENTS_PER_BATCH) for p in posts)
    f["stored_in_phase"] = POST_AT_S + f["stored_s"] <= args.seconds
    f["wall_s"] = time.perf_counter() - t0
    return f


def line(when: str, f: dict[str, Any]) -> str:
    text = (
        f"  {when:7} p50 {f['p50']:7.1f}  p99 {f['p99']:7.1f}  max {f['max']:7.1f} ms"
        f"  ({f['n']} answers, errors {f.get('errors', 0)}, load {f['load']:.2f})"
    )
    if "posts" in f:
        accepted = sum(a for _, a in f["posts"])
        text += (
            f"\n          posts {[s for s, _ in f['posts']]} accepted {accepted:,} in "
            f"{f['posted_s']:.2f} s; 30,000 stored {f['stored_s']:.1f} s after the first post "
            f"({'inside' if f['stored_in_phase'] else 'after'} the phase)"
            f"{'' if f['valid'] else '  ** NOT VALID: a post was not accepted in the phase **'}"
        )
    return text


async def bench(args: argparse.Namespace, bootstrap: str, admin_url: str, workdir: Path) -> None:
    async with (
        scratch_topic(bootstrap, "bigposts", 4) as topic,
        scratch_database(admin_url, "bigposts") as db_url,
    ):
        extra = {
            "MONITOR_GATE_TOKEN": TOKEN,
            "MONITOR_INGEST_TOKEN": TOKEN,
            "MONITOR_JUDGE_ENABLED": "false",
            "MONITOR_ALERTING_ENABLED": "false",
            "MONITOR_TOPIC_PARTITIONS": "4",
            "MONITOR_HTTP_GATE_RATE_PER_S": "0",
            "MONITOR_HTTP_INGEST_RATE_PER_S": "0",
        }
        worker = Worker(bootstrap, db_url, topic, workdir / "worker.log", extra)
        with running(worker), contextlib.ExitStack() as stack:
            await worker.wait_ready()
            argv = ("-m", "monitor.cli", "gate", "serve", "--loglevel", "info")
            gate = Worker(bootstrap, db_url, topic, workdir / "gate.log", extra, argv=argv)
            gate.env["MONITOR_GATE_PORT"] = str(gate.port)
            gate.env["MONITOR_STATE_DIR"] = worker.env["MONITOR_STATE_DIR"]  # origin key
            stack.enter_context(running(gate))
            await gate.wait_ready()
            targets = {"gate": f"http://127.0.0.1:{gate.port}/v1/gate"}
            async with aiohttp.ClientSession() as session:  # the worker's route is gone
                url = f"http://127.0.0.1:{worker.port}/v1/gate"
                async with session.post(url, json={"content": "x"}) as r:
                    moved = await r.json()
                    assert (r.status, moved["reason"]) == (404, "gate_elsewhere"), moved
                print(f"the worker's /v1/gate: 404 {moved['reason']}: {moved['error']}")
            pids = (worker.pid, gate.pid)
            client = await Client.start()
            results: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {
                t: [] for t in targets
            }
            try:
                bodies = Bodies(1)
                async with aiohttp.ClientSession() as session:
                    for url in targets.values():  # warm: maps loaded, history cached
                        headers = {
                            "Authorization": f"Bearer {TOKEN}",
                            "Content-Type": "application/json",
                        }
                        async with session.post(url, data=bodies.all[0], headers=headers) as r:
                            assert r.status == 200, await r.text()
                warm = await loaded_phase(
                    client, targets["gate"], args, worker, pids, db_url, "warm"
                )
                print("warm-up (not counted):\n" + line("loaded", warm))
                for pair in range(args.pairs):
                    for target, url in targets.items():
                        alone = await phase(client, url, args, pids, db_url)
                        loaded = await loaded_phase(
                            client, url, args, worker, pids, db_url, f"p{pair}{target}"
                        )
                        results[target].append((alone, loaded))
                        print(f"pair {pair + 1}, the {target} process's /v1/gate:")
                        print(line("alone", alone))
                        print(line("loaded", loaded))
                        print(f"  p99 loaded / alone: {loaded['p99'] / alone['p99']:.2f}")
            finally:
                await client.close()
            for name in ("worker.log", "gate.log"):
                text = (workdir / name).read_text(errors="replace")
                if "Traceback" in text:
                    print(f"--- {name} holds a traceback:\n{text[-3000:]}")
    summary(results, args)


def summary(
    results: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]], args: argparse.Namespace
) -> None:
    print(
        f"\n{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} cores, "
        f"open loop {args.rate:g}/s for {args.seconds:g} s, {BATCHES} x {EVENTS_PER_BATCH:,} "
        f"events {'posted' if args.via == 'http' else 'produced'} {POST_AT_S:g} s in"
    )
    for target, pairs in results.items():
        valid = [(a, b) for a, b in pairs if b["valid"]]
        ratios = [b["p99"] / a["p99"] for a, b in valid]
        alone = ", ".join(f"{a['p99']:.1f}" for a, _ in pairs)
        loaded = ", ".join(f"{b['p99']:.1f}" for _, b in pairs)
        median = f"{statistics.median(ratios):.2f}" if ratios else "n/a"
        print(
            f"{target:6} p99 alone {alone} ms; loaded {loaded} ms; ratio per valid pair "
            f"{', '.join(f'{r:.2f}' for r in ratios) or 'none'} (median {median}; "
            f"{len(pairs) - len(valid)} not valid)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="gate requests/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="each open loop")
    parser.add_argument("--pairs", type=int, default=2, help="alone/loaded pairs per target")
    parser.add_argument(
        "--via",
        choices=("http", "kafka"),
        default="http",
        help="the load: posted to /v1/events (default) or produced to the topic",
    )
    args = parser.parse_args()
    with (
        harness.work_dir("bigposts") as workdir,
        harness.broker_and_postgres(workdir) as (
            bootstrap,
            admin_url,
        ),
    ):
        asyncio.run(bench(args, bootstrap, admin_url, workdir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
