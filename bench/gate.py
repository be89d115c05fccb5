"""Gate speed: the gate process (``monitor gate serve``) against a publishing baseline, alone
and beside ingest load, with its CPU per decision.

The gate process runs as ``bench/gate_process.py``: the real :class:`GateServer` plus
``POST /bench/constant``, the **baseline**: the same aiohttp application, process and event loop
answering a constant decision *and publishing one decision event through the gate's own path*
(outbox, producer). A real worker (``monitor worker``, judges and alerting off) on the same
broker, topic and database ingests the decision events, as in production. The request is an
agent's next message with the conversation so far (a user message, two tool calls, one failed
tool result: 5 history events, ~1.7 KB), so the four deterministic checks run inline on every
request (two of them fire). Requests cycle over ``--conversations`` distinct conversation ids.

Each of ``--repeat`` rounds measures, in this order:

- open loop at ``--rate`` requests/s (started every 1/rate s whatever the answers) for
  ``--seconds``, **alone** (once, over a second, the worker stored no event and neither the
  worker nor the gate process used more than 5 % of a core: no backlog of earlier phases, no
  decision events replayed from the gate's disk buffer): client p50/p99 (goal p99 < 10 ms at
  500/s), in-handler ``latency_ms``, CPU per decision;
- the same open loop **with ingest load**: a separate process sends simulated events with the
  SDK (``bench/ingest.py``'s producer) to the worker's topic at ``--load-rate`` events/s, from
  1 s before the open loop until it ends, and the worker ingests them into Postgres (unpaced,
  the producer and broker take both cores and the worker stores almost nothing: the gate would
  be measured beside a producer, not beside ingest); printed: the same
  figures, the events the worker stored meanwhile, and the **p99 ratio loaded / alone** (goal
  <= 1.5);
- closed loop (``c`` clients each sending the next request when the previous answer arrived),
  once the load's backlog is stored, for ``--seconds`` at each of ``--concurrency``: the
  baseline, then the gate; printed: req/s, client p50/p99, the **ratio gate / baseline** (goal
  >= 0.5) and the gate process's **CPU per request** (user + system CPU of the process over the
  phase / answers, from /proc).

Every process (client, gate, worker, load producer, broker, Postgres) shares the machine's
cores, at the same priority unless ``--gate-nice`` gives the gate process a nice value of its
own (``MONITOR_GATE_NICE``: a deployment's choice, docs/gate.md; both figures are reported
apart); the 1-minute load average is printed per phase (other sessions may share the machine:
prefer the ratios, measured in the same round). The summary gives each figure's range over
the rounds. Run from the repository root::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test .venv/bin/python bench/gate.py
    .venv/bin/python bench/gate.py --seconds 3 --rate 300 --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench import harness
from bench.harness import REPO, Worker, running, scratch_database, scratch_topic

TOKEN = "bench-gate"
T = "2026-01-01T00:00:0{}+00:00"
AGENT = {"id": "bench-agent"}


def history_event(cid: str, i: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": "agent-event/v1",
        "event_id": f"h{i}",
        "type": kind,
        "ts": T.format(i),
        "conversation_id": cid,
        "agent": AGENT,
        kind: payload,
    }


def body(cid: str) -> bytes:
    """The gate request of conversation ``cid``: the same history and message in every
    conversation, except a short note naming it (no figure), so no memo of a text's analysis
    serves one conversation's message to the next: each request analyses its proposal."""
    return json.dumps(
        {
            "conversation_id": cid,
            "agent": {"id": "bench-agent"},
            "domain": "retail",
            "confidence": 0.85,
            "content": "Your order #W2378156 has been cancelled and $348.20 will be refunded to "
            f"your card ending 4421 within 5-7 business days (note {cid[-3:]}).",
            "history": [
                history_event(
                    cid,
                    1,
                    "message",
                    {"role": "user", "content": "Please cancel order #W2378156, it was $348.20."},
                ),
                history_event(
                    cid,
                    2,
                    "message",
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": "k1",
                                "name": "get_order_details",
                                "arguments": {"order_id": "#W2378156"},
                            }
                        ],
                    },
                ),
                history_event(
                    cid,
                    3,
                    "tool_result",
                    {
                        "call_id": "k1",
                        "name": "get_order_details",
                        "ok": True,
                        "content": '{"status": "pending", "total": 348.20}',
                    },
                ),
                history_event(
                    cid,
                    4,
                    "message",
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": "k2",
                                "name": "cancel_pending_order",
                                "arguments": {"order_id": "#W2378156"},
                            }
                        ],
                    },
                ),
                history_event(
                    cid,
                    5,
                    "tool_result",
                    {
                        "call_id": "k2",
                        "name": "cancel_pending_order",
                        "ok": False,
                        "error": "payment service timeout",
                    },
                ),
            ],
        }
    ).encode()


class Bodies:
    """The requests' bodies, one per conversation, handed out in turn."""

    def __init__(self, conversations: int) -> None:
        self.all = [body(f"bench-c{i}") for i in range(conversations)]
        self.next = itertools.cycle(self.all).__next__


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def closed_loop(
    session: aiohttp.ClientSession, url: str, bodies: Bodies, clients: int, seconds: float
) -> dict[str, Any]:
    """``clients`` concurrent loops for ``seconds``: throughput and client latencies (ms)."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    degraded: list[bytes] = []
    stop = time.perf_counter() + seconds
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    load = os.getloadavg()[0]

    async def loop() -> None:
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            async with session.post(url, data=bodies.next(), headers=headers) as r:
                answer = await r.read()
                statuses[r.status] = statuses.get(r.status, 0) + 1
                if b'"degraded":null' not in answer:  # fail-open/closed decided (deadline)
                    degraded.append(answer)
            latencies.append((time.perf_counter() - t0) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    return {
        "rps": len(latencies) / elapsed,
        "p50": pct(latencies, 0.5),
        "p99": pct(latencies, 0.99),
        "n": len(latencies),
        "statuses": statuses,
        "load": max(load, os.getloadavg()[0]),
        "degraded": len(degraded),
    }


async def open_loop(
    session: aiohttp.ClientSession, url: str, bodies: Bodies, rate: float, seconds: float
) -> dict[str, Any]:
    """Requests started every 1/``rate`` s for ``seconds``, whatever the answers."""
    latencies: list[float] = []
    server: list[float] = []
    degraded: list[bool] = []
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    async def one() -> None:
        t0 = time.perf_counter()
        async with session.post(url, data=bodies.next(), headers=headers) as r:
            answer = await r.json()
        latencies.append((time.perf_counter() - t0) * 1000)
        server.append(float(answer["latency_ms"]))
        degraded.append(answer["degraded"] is not None)

    tasks = []
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one()))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    return {
        "rate": rate,
        "achieved": n / elapsed,
        "p50": pct(latencies, 0.5),
        "p99": pct(latencies, 0.99),
        "server_p50": pct(server, 0.5),
        "server_p99": pct(server, 0.99),
        "n": n,
        "load": os.getloadavg()[0],
        "degraded": sum(degraded),
    }


def ingest_load(
    bootstrap: str, topic: str, seed: int, rate: float, ready: Any, stop: Any, sent: Any
) -> None:
    """The load process: simulated events sent with the SDK (``bench/ingest.py``'s producer)
    at ``rate`` events/s (0: as fast as the broker takes them), from ``ready`` until ``stop``
    is set; ``sent`` counts."""
    from datetime import UTC, datetime, timedelta

    from monitor.sdk import EventEmitter
    from monitor.sim.traffic import Simulator

    async def run() -> None:
        events = Simulator(seed=seed, start=datetime.now(UTC) - timedelta(hours=2)).events()
        async with EventEmitter(bootstrap, topic, idempotent=False) as emitter:
            ready.set()
            n, t0 = 0, time.monotonic()
            while not stop.is_set():
                for event in itertools.islice(events, 200):
                    await emitter.send(event)
                n += 200
                sent.value = n
                if rate > 0:  # paced: the worker can store what is sent while it is sent
                    await asyncio.sleep(max(0.0, t0 + n / rate - time.monotonic()))
            await emitter.flush()

    asyncio.run(run())


async def stored_events(db_url: str) -> int:
    """Events the worker stored so far (``event_minutes``, written with the events)."""
    conn = await asyncpg.connect(db_url)
    try:
        return int(await conn.fetchval("SELECT coalesce(sum(events), 0) FROM event_minutes"))
    finally:
        await conn.close()


async def settle(db_url: str, pids: tuple[int, ...], timeout_s: float = 120.0) -> None:
    """Wait until, over one second, the worker stored no new event of any type and none of
    ``pids`` (the gate process, the worker) used more than 5 % of a core (at most
    ``timeout_s``): the earlier phases' decision events (the closed loops publish tens of
    thousands, which ``event_minutes`` does not count; the gate may replay some from its disk
    buffer) and load ingested, so the next phase runs alone."""
    deadline, last = time.monotonic() + timeout_s, -1
    conn = await asyncpg.connect(db_url)
    try:
        while time.monotonic() < deadline:
            cpu0 = [harness.cpu_seconds(p) for p in pids]
            await asyncio.sleep(1.0)
            busy = any(harness.cpu_seconds(p) - c > 0.05 for p, c in zip(pids, cpu0, strict=True))
            now = int(await conn.fetchval("SELECT count(*) FROM events"))
            if now == last and not busy:
                return
            last = now
    finally:
        await conn.close()


def with_cpu(pid: int, coro_result: dict[str, Any], cpu0: float, answers_key: str) -> None:
    coro_result["cpu_us"] = (
        (harness.cpu_seconds(pid) - cpu0) / max(coro_result[answers_key], 1) * 1e6
    )


async def one_round(
    session: aiohttp.ClientSession,
    args: argparse.Namespace,
    gate: Worker,
    worker: Worker,
    bootstrap: str,
    topic: str,
    db_url: str,
    index: int,
) -> dict[str, Any]:
    own = f"http://127.0.0.1:{gate.port}/v1/gate"
    constant = f"http://127.0.0.1:{gate.port}/bench/constant"
    bodies = Bodies(args.conversations)
    out: dict[str, Any] = {"closed": {}}
    await settle(db_url, (gate.pid, worker.pid))  # the previous phases done: the gate alone
    cpu0 = harness.cpu_seconds(gate.pid)
    alone = await open_loop(session, own, bodies, args.rate, args.seconds)
    with_cpu(gate.pid, alone, cpu0, "n")
    print_open(f"[{index}] alone", alone)
    ctx = multiprocessing.get_context("spawn")
    ready, stop, sent = ctx.Event(), ctx.Event(), ctx.Value("q", 0)
    load = ctx.Process(
        target=ingest_load,
        args=(bootstrap, topic, 1000 + index, args.load_rate, ready, stop, sent),
    )
    load.start()
    try:
        await asyncio.to_thread(ready.wait, 60)
        await asyncio.sleep(1.0)  # the worker busy ingesting before the first request
        stored0 = await stored_events(db_url)
        cpu0 = harness.cpu_seconds(gate.pid)
        t0 = time.perf_counter()
        loaded = await open_loop(session, own, bodies, args.rate, args.seconds)
        with_cpu(gate.pid, loaded, cpu0, "n")
        loaded["ingested_per_s"] = (await stored_events(db_url) - stored0) / (
            time.perf_counter() - t0
        )
    finally:
        stop.set()
        await asyncio.to_thread(load.join, 30)
        if load.is_alive():
            load.kill()
    loaded["sent"] = sent.value
    print_open(f"[{index}] with ingest load", loaded)
    print(
        f"[{index}] ingest load: {loaded['sent']:,} events sent, worker stored "
        f"{loaded['ingested_per_s']:,.0f} events/s during the open loop | p99 loaded / alone "
        f"{loaded['p99'] / alone['p99']:.2f}",
        flush=True,
    )
    out["alone"], out["loaded"] = alone, loaded
    await settle(db_url, (gate.pid, worker.pid))  # the load's backlog ingested
    for c in args.concurrency:
        cpu0 = harness.cpu_seconds(gate.pid)
        base = await closed_loop(session, constant, bodies, c, args.seconds)
        with_cpu(gate.pid, base, cpu0, "n")
        cpu0 = harness.cpu_seconds(gate.pid)
        lane = await closed_loop(session, own, bodies, c, args.seconds)
        with_cpu(gate.pid, lane, cpu0, "n")
        assert set(base["statuses"]) == {200} == set(lane["statuses"]), (base, lane)
        out["closed"][c] = (base, lane)
        print(
            f"[{index}] c={c}: baseline {base['rps']:,.0f} req/s p50 {base['p50']:.2f} p99 "
            f"{base['p99']:.2f} ms, CPU {base['cpu_us']:.0f} us/answer | gate {lane['rps']:,.0f}"
            f" req/s p50 {lane['p50']:.2f} p99 {lane['p99']:.2f} ms, CPU {lane['cpu_us']:.0f} "
            f"us/decision | ratio {lane['rps'] / base['rps']:.2f} | load {lane['load']:.1f} | "
            f"degraded {lane['degraded']}",
            flush=True,
        )
    return out


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """``min-max (median)`` of ``values``."""
    lo, mid, hi = min(values), statistics.median(values), max(values)
    return f"{fmt.format(lo)}-{fmt.format(hi)} (median {fmt.format(mid)})"


def summary(rounds: list[dict[str, Any]], concurrency: list[int]) -> None:
    print(f"\nsummary over {len(rounds)} rounds (min-max, median):")
    for c in concurrency:
        pairs = [r["closed"][c] for r in rounds]
        ratios = [g["rps"] / b["rps"] for b, g in pairs]
        print(
            f"  c={c}: ratio gate / publishing baseline {spread(ratios)}"
            f"; gate {spread([g['rps'] for _, g in pairs], '{:,.0f}')} req/s, baseline "
            f"{spread([b['rps'] for b, _ in pairs], '{:,.0f}')} req/s; CPU per decision "
            f"{spread([g['cpu_us'] for _, g in pairs], '{:.0f}')} us, per baseline answer "
            f"{spread([b['cpu_us'] for b, _ in pairs], '{:.0f}')} us"
        )
    alone = [r["alone"] for r in rounds]
    loaded = [r["loaded"] for r in rounds]
    print(
        f"  open loop alone: p99 {spread([a['p99'] for a in alone])} ms, p50 "
        f"{spread([a['p50'] for a in alone])} ms, in-handler p99 "
        f"{spread([a['server_p99'] for a in alone])} ms, CPU per decision "
        f"{spread([a['cpu_us'] for a in alone], '{:.0f}')} us"
    )
    print(
        f"  open loop with ingest load: p99 {spread([x['p99'] for x in loaded])} ms, in-handler"
        f" p99 {spread([x['server_p99'] for x in loaded])} ms, worker stored "
        f"{spread([x['ingested_per_s'] for x in loaded], '{:,.0f}')} events/s; p99 loaded / "
        f"alone {spread([x['p99'] / a['p99'] for a, x in zip(alone, loaded, strict=True)])}"
    )
    print(
        json.dumps(
            {
                "python": platform.python_version(),
                "cores": os.cpu_count(),
                "rounds": [
                    {
                        "ratios": {
                            c: r["closed"][c][1]["rps"] / r["closed"][c][0]["rps"]
                            for c in concurrency
                        },
                        "p99_alone": r["alone"]["p99"],
                        "p99_loaded": r["loaded"]["p99"],
                        "cpu_us_open_loop": r["alone"]["cpu_us"],
                    }
                    for r in rounds
                ],
            }
        )
    )


async def bench(args: argparse.Namespace, bootstrap: str, admin_url: str, workdir: Path) -> None:
    async with (
        scratch_topic(bootstrap, "gate", 4) as topic,
        scratch_database(admin_url, "gate") as db_url,
    ):
        extra = {
            "MONITOR_GATE_TOKEN": TOKEN,
            "MONITOR_JUDGE_ENABLED": "false",
            "MONITOR_ALERTING_ENABLED": "false",
            "MONITOR_TOPIC_PARTITIONS": "4",
            "MONITOR_HTTP_GATE_RATE_PER_S": "0",
        }
        worker = Worker(bootstrap, db_url, topic, workdir / "worker.log", extra)
        with running(worker), contextlib.ExitStack() as stack:
            await worker.wait_ready()
            argv = (str(REPO / "bench" / "gate_process.py"),)
            gate = Worker(bootstrap, db_url, topic, workdir / "gate.log", extra, argv=argv)
            gate.env["MONITOR_GATE_PORT"] = str(gate.port)
            gate.env["MONITOR_STATE_DIR"] = worker.env["MONITOR_STATE_DIR"]  # origin key
            if args.no_tune_gc:
                gate.env["BENCH_NO_TUNE_GC"] = "1"
            gate.env["MONITOR_GATE_NICE"] = str(args.gate_nice)
            stack.enter_context(running(gate))
            await gate.wait_ready()
            own = f"http://127.0.0.1:{gate.port}/v1/gate"
            constant = f"http://127.0.0.1:{gate.port}/bench/constant"
            bodies = Bodies(args.conversations)
            headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                async with session.post(own, data=bodies.all[0], headers=headers) as r:
                    sample = await r.json()
                print("sample answer:", json.dumps(sample)[:400])
                print(f"gate process nice value {os.getpriority(os.PRIO_PROCESS, gate.pid)}")
                await closed_loop(session, own, bodies, 4, 1.0)  # warm-up (history cached)
                await closed_loop(session, constant, bodies, 4, 1.0)
                await asyncio.sleep(2)  # the warm-up's decision events ingested
                rounds = [
                    await one_round(session, args, gate, worker, bootstrap, topic, db_url, i)
                    for i in range(args.repeat)
                ]
            gate_log = (workdir / "gate.log").read_text(errors="replace")
            if "Traceback" in gate_log:
                print(gate_log[-3000:])
    summary(rounds, args.concurrency)


def print_open(when: str, f: dict[str, Any]) -> None:
    print(
        f"open loop {f['rate']:.0f} req/s, {when} (achieved {f['achieved']:.0f}): p50 "
        f"{f['p50']:.2f} ms, p99 {f['p99']:.2f} ms; in-handler latency_ms p50 "
        f"{f['server_p50']:.2f}, p99 {f['server_p99']:.2f}; CPU {f['cpu_us']:.0f} us/decision; "
        f"load {f['load']:.1f}; degraded {f['degraded']}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="Per phase.")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--rate", type=float, default=500.0, help="Open-loop requests/s.")
    parser.add_argument("--repeat", type=int, default=3, help="Rounds (3).")
    parser.add_argument(
        "--load-rate",
        type=float,
        default=1500.0,
        help="Events/s of the ingest load (0: as fast as the broker takes them, which on two "
        "cores starves the worker: it then stores almost nothing while the gate is measured).",
    )
    parser.add_argument(
        "--no-tune-gc", action="store_true", help="The gate process keeps the GC defaults."
    )
    parser.add_argument(
        "--gate-nice",
        type=int,
        default=0,
        help="MONITOR_GATE_NICE of the gate process (0: the same priority as the worker, "
        "broker, Postgres and load; -5: the gate's own lane in CPU, docs/gate.md).",
    )
    parser.add_argument(
        "--conversations",
        type=int,
        default=256,
        help="Distinct conversations the requests cycle over.",
    )
    args = parser.parse_args()
    with (
        harness.work_dir("bench-gate-") as workdir,
        harness.broker_and_postgres(workdir) as (bootstrap, pg),
    ):
        asyncio.run(bench(args, bootstrap, pg, workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
