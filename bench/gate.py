"""Gate speed: the gate process (``monitor gate serve``) against a publishing baseline, and its
p99 alone and beside ingest load, with its CPU per decision.

The gate process runs as ``bench/gate_process.py``: the real :class:`GateServer` plus
``POST /bench/constant``, the **baseline**: the same aiohttp application, process and event loop
answering a constant decision *and publishing one decision event through the gate's own path*
(outbox, producer), and ``GET /bench/ping`` (``{}``, nothing else). A real worker (``monitor
worker``, judges and alerting off) on the same broker, topic and database ingests the decision
events, as in production. The request is an agent's next message with the conversation so far
(a user message, two tool calls, one failed tool result: 5 history events, ~1.7 KB), so the
four deterministic checks run inline on every request (two of them fire). Requests cycle over
``--conversations`` distinct conversation ids.

**Open loop** (the p99 goals): driven by ``bench/gate_client.py``, a process and session of its
own (not this bench's event loop), over kept-alive connections, request ``i`` scheduled at
``start + i / --rate`` whatever the answers, **latency measured from the scheduled time** (a
stall is counted in every request it delayed: no coordinated omission). First the client's
**floor**: the same open loop against ``GET /bench/ping``. Then ``--pairs`` **A/B pairs**,
each for every ``--gate-nice`` value (the gate's nice value and its autogroup's, set by this
bench between phases): **alone** (once, over a second, the worker stored no event and neither
the worker nor the gate process used more than 5 % of a core), then **loaded**: a separate
process sends simulated events with the SDK (``bench/ingest.py``'s producer) to the worker's
topic at ``--load-rate`` events/s, from 1 s before the open loop until it ends, and the worker
stores them in Postgres. Its simulated stream starts 3 days back (the simulator's clock runs
~1,000x real time at 1,500 events/s; events more than 300 s ahead of real time would be
dead-lettered, not stored). Per loaded phase: the events/s the load sent and the worker stored
(``event_minutes`` without the gate's own decision events); a phase where it stored under 80 %
of ``--load-rate`` is flagged **NOT VALID** (not a loaded measurement). Each phase lasts
``--open-seconds`` (20: 10,000 answers at 500/s, the p99 being the 100th slowest). Printed per
phase: p50/p99/p99.9/max from the client, the answers' in-handler ``latency_ms``, the gate's
CPU per decision, the worker's and the client's CPU share and how late the client sent; per
pair the **p99 ratio loaded / alone**; in the summary, per nice value, the p99s, each pair's
ratio and their median over the valid pairs (goals: p99 alone < 10 ms, ratio <= 1.5).

**Closed loop** (the throughput goal): ``--repeat`` rounds, each at every ``--concurrency``
(``c`` clients in this bench's event loop each sending the next request when the previous
answer arrived) for ``--seconds``: the baseline, then the gate; printed: req/s, client
p50/p99, the **ratio gate / baseline** (goal >= 0.5) and the gate process's **CPU per
request** (user + system CPU of the process over the phase / answers, from /proc), at the
first ``--gate-nice`` value.

Every process (client, gate, worker, load producer, broker, Postgres) shares the machine's
cores; the worker, gate, broker, Postgres and client each lead a session of their own (their
own autogroup where ``kernel.sched_autogroup_enabled``; printed); the client runs at
``--client-nice`` (-10: its own waits for a core are not the gate's latency; its send lag is
printed). The 1-minute load average is
printed per phase: prefer the ratios of a pair, measured a minute apart. Run from the
repository root (the quiet measurement: ~12 minutes with two nice values)::

    .venv/bin/python bench/gate.py --gate-nice 0 -10
    .venv/bin/python bench/gate.py --open-seconds 5 --pairs 2 --seconds 2 --repeat 1
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench import harness
from bench.harness import REPO, Worker, running, scratch_database, scratch_topic
from monitor.gate.server import apply_nice

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


#: how far back the load's simulated stream starts: its clock runs ~1,000 times faster than
#: real time at 1,500 events/s (the simulator makes ~1.5 events per simulated second), and the
#: worker dead-letters events more than ``max_future_skew_s`` (300 s) ahead of real time
LOAD_START_BACK = timedelta(days=3)


def ingest_load(
    bootstrap: str, topic: str, seed: int, rate: float, ready: Any, stop: Any, sent: Any, ahead: Any
) -> None:
    """The load process: simulated events sent with the SDK (``bench/ingest.py``'s producer)
    at ``rate`` events/s (0: as fast as the broker takes them), from ``ready`` until ``stop``
    is set; ``sent`` counts, ``ahead`` holds how far (s) the stream's clock is ahead of real
    time at the last event sent (negative: behind, as it must stay for the worker to store
    the events; :data:`LOAD_START_BACK`)."""
    from monitor.sdk import EventEmitter
    from monitor.sim.traffic import Simulator

    async def run() -> None:
        events = Simulator(seed=seed, start=datetime.now(UTC) - LOAD_START_BACK).events()
        async with EventEmitter(bootstrap, topic, idempotent=False) as emitter:
            ready.set()
            n, t0 = 0, time.monotonic()
            while not stop.is_set():
                for event in itertools.islice(events, 200):
                    await emitter.send(event)
                n += 200
                sent.value = n
                ahead.value = (event.ts - datetime.now(UTC)).total_seconds()
                if rate > 0:  # paced: the worker can store what is sent while it is sent
                    await asyncio.sleep(max(0.0, t0 + n / rate - time.monotonic()))
            await emitter.flush()

    asyncio.run(run())


async def stored_events(db_url: str) -> int:
    """Events other than decision events the worker stored so far (``event_minutes``,
    written with the events; the gate's decision events, type ``gate``, left out: the load's)."""
    conn = await asyncpg.connect(db_url)
    try:
        return int(
            await conn.fetchval(
                "SELECT coalesce(sum(events), 0) FROM event_minutes WHERE type <> 'gate'"
            )
        )
    finally:
        await conn.close()


async def settle(db_url: str, pids: tuple[int, ...], timeout_s: float = 120.0) -> None:
    """Wait until, over one second, the worker stored no new event of any type and none of
    ``pids`` (the gate process, the worker) used more than 5 % of a core (at most
    ``timeout_s``): the earlier phases' decision events (the closed loops publish tens of
    thousands; the gate may replay some from its disk buffer) and load ingested, so the next
    phase runs alone."""
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


class Client:
    """``bench/gate_client.py`` in a process and session of its own: open loops on command."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls) -> Client:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(REPO / "bench" / "gate_client.py"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            start_new_session=True,  # its own autogroup: not weighed with the bench's work
        )
        return cls(proc)

    async def open_loop(
        self, url: str, rate: float, seconds: float, **extra: Any
    ) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        command = {"op": "open", "url": url, "rate": rate, "seconds": seconds, "token": TOKEN}
        self.proc.stdin.write((json.dumps({**command, **extra}) + "\n").encode())
        await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the open-loop client exited ({await self.proc.wait()})")
        result: dict[str, Any] = json.loads(line)
        result["load"] = os.getloadavg()[0]
        return result

    async def close(self) -> None:
        if self.proc.returncode is None and self.proc.stdin is not None:
            self.proc.stdin.write(b'{"op": "quit"}\n')
            with contextlib.suppress(ConnectionError):
                await self.proc.stdin.drain()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


class Bench:
    """One run's processes and settings: the gate process, the worker, the open-loop client."""

    def __init__(
        self,
        args: argparse.Namespace,
        gate: Worker,
        worker: Worker,
        client: Client,
        bootstrap: str,
        topic: str,
        db_url: str,
    ) -> None:
        self.args, self.gate, self.worker, self.client = args, gate, worker, client
        self.bootstrap, self.topic, self.db_url = bootstrap, topic, db_url
        self.own = f"http://127.0.0.1:{gate.port}/v1/gate"
        self.loads = 0  # load processes started (each simulates a stream of its own)

    async def open_phase(self) -> dict[str, Any]:
        """One open loop at ``--rate`` on the gate, with the gate's and worker's CPU."""
        cpu0, wcpu0 = harness.cpu_seconds(self.gate.pid), harness.cpu_seconds(self.worker.pid)
        a = self.args
        f = await self.client.open_loop(
            self.own, a.rate, a.open_seconds, conversations=a.conversations
        )
        with_cpu(self.gate.pid, f, cpu0, "n")
        f["worker_cpu_share"] = (harness.cpu_seconds(self.worker.pid) - wcpu0) / f["seconds"]
        return f

    async def alone(self) -> dict[str, Any]:
        await settle(self.db_url, (self.gate.pid, self.worker.pid))  # no backlog: the gate alone
        return await self.open_phase()

    async def loaded(self) -> dict[str, Any]:
        """The open loop while a load process sends ``--load-rate`` events/s the worker stores:
        with what the worker stored and the load sent over the phase."""
        self.loads += 1
        ctx = multiprocessing.get_context("spawn")
        ready, stop = ctx.Event(), ctx.Event()
        sent, ahead = ctx.Value("q", 0), ctx.Value("d", 0.0)
        load = ctx.Process(
            target=ingest_load,
            args=(
                self.bootstrap,
                self.topic,
                1000 + self.loads,
                self.args.load_rate,
                ready,
                stop,
                sent,
                ahead,
            ),
        )
        await settle(self.db_url, (self.gate.pid, self.worker.pid))
        load.start()
        try:
            await asyncio.to_thread(ready.wait, 60)
            await asyncio.sleep(1.0)  # the worker busy ingesting before the first request
            stored0, sent0 = await stored_events(self.db_url), sent.value
            t0 = time.perf_counter()
            f = await self.open_phase()
            elapsed = time.perf_counter() - t0
            f["stored_per_s"] = (await stored_events(self.db_url) - stored0) / elapsed
            f["sent_per_s"] = (sent.value - sent0) / elapsed
        finally:
            stop.set()
            await asyncio.to_thread(load.join, 30)
            if load.is_alive():
                load.kill()
        f["stream_ahead_s"] = ahead.value
        f["valid"] = f["stored_per_s"] >= VALID_SHARE * self.args.load_rate
        return f


#: a loaded phase counts only if the worker stored at least this share of the load's rate
VALID_SHARE = 0.8


async def ab_pairs(bench: Bench) -> dict[int, list[tuple[dict[str, Any], dict[str, Any]]]]:
    """``--pairs`` times, for each ``--gate-nice`` value: the gate's nice value (process and
    autogroup) set, then the open loop alone, then loaded; per nice value, the pairs."""
    args = bench.args
    pairs: dict[int, list[tuple[dict[str, Any], dict[str, Any]]]] = {n: [] for n in args.gate_nice}
    for i in range(args.pairs):
        for nice in args.gate_nice:
            if not apply_nice(nice, bench.gate.pid):
                raise SystemExit(f"could not give the gate process the nice value {nice}")
            tag = f"[pair {i + 1} nice {nice}]"
            alone = await bench.alone()
            print_open(f"{tag} alone", alone)
            loaded = await bench.loaded()
            print_open(f"{tag} loaded", loaded)
            share = loaded["stored_per_s"] / args.load_rate
            verdict = "valid" if loaded["valid"] else "NOT VALID: stored < 80 %, not loaded"
            print(
                f"{tag} ingest load: sent {loaded['sent_per_s']:,.0f} events/s, worker stored "
                f"{loaded['stored_per_s']:,.0f} events/s = {share:.0%} of {args.load_rate:,.0f} "
                f"({verdict}"
                f"; stream clock {loaded['stream_ahead_s']:+,.0f} s from real time) | p99 loaded / "
                f"alone {loaded['p99'] / alone['p99']:.2f}",
                flush=True,
            )
            pairs[nice].append((alone, loaded))
    return pairs


async def closed_rounds(
    session: aiohttp.ClientSession, bench: Bench
) -> list[dict[int, tuple[dict[str, Any], dict[str, Any]]]]:
    """``--repeat`` rounds of closed loops at each ``--concurrency``: baseline, then gate."""
    gate, args = bench.gate, bench.args
    constant = f"http://127.0.0.1:{gate.port}/bench/constant"
    bodies = Bodies(args.conversations)
    rounds = []
    for index in range(args.repeat if args.concurrency else 0):
        await settle(bench.db_url, (gate.pid, bench.worker.pid))
        out = {}
        for c in args.concurrency:
            cpu0 = harness.cpu_seconds(gate.pid)
            base = await closed_loop(session, constant, bodies, c, args.seconds)
            with_cpu(gate.pid, base, cpu0, "n")
            cpu0 = harness.cpu_seconds(gate.pid)
            lane = await closed_loop(session, bench.own, bodies, c, args.seconds)
            with_cpu(gate.pid, lane, cpu0, "n")
            assert set(base["statuses"]) == {200} == set(lane["statuses"]), (base, lane)
            out[c] = (base, lane)
            print(
                f"[{index}] c={c}: baseline {base['rps']:,.0f} req/s p50 {base['p50']:.2f} p99 "
                f"{base['p99']:.2f} ms, CPU {base['cpu_us']:.0f} us/answer | gate "
                f"{lane['rps']:,.0f} req/s p50 {lane['p50']:.2f} p99 {lane['p99']:.2f} ms, CPU "
                f"{lane['cpu_us']:.0f} us/decision | ratio {lane['rps'] / base['rps']:.2f} | "
                f"load {lane['load']:.1f} | degraded {lane['degraded']}",
                flush=True,
            )
        rounds.append(out)
    return rounds


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """``min-max (median)`` of ``values``."""
    if not values:
        return "none"
    lo, mid, hi = min(values), statistics.median(values), max(values)
    return f"{fmt.format(lo)}-{fmt.format(hi)} (median {fmt.format(mid)})"


def listed(values: list[float], fmt: str = "{:.2f}") -> str:
    return ", ".join(fmt.format(v) for v in values)


def summary(
    floor: dict[str, Any],
    pairs: dict[int, list[tuple[dict[str, Any], dict[str, Any]]]],
    rounds: list[dict[int, tuple[dict[str, Any], dict[str, Any]]]],
    args: argparse.Namespace,
) -> None:
    print(
        f"\nsummary ({args.pairs} A/B pairs of {args.open_seconds:.0f} s at {args.rate:.0f} req/s):"
    )
    print(
        f"  client floor (GET /bench/ping, same rate): p50 {floor['p50']:.2f} p99 "
        f"{floor['p99']:.2f} ms, client CPU {floor['client_cpu_share']:.0%} of a core"
    )
    verdicts = {}
    for nice, got in pairs.items():
        if not got:  # --pairs 0: closed loops only
            continue
        ratios = [lo["p99"] / a["p99"] for a, lo in got]
        valid = [r for r, (_, lo) in zip(ratios, got, strict=True) if lo["valid"]]
        alone_p99 = [a["p99"] for a, _ in got]
        print(
            f"  nice {nice}: p99 alone {listed(alone_p99)} ms (median "
            f"{statistics.median(alone_p99):.2f}); loaded {listed([lo['p99'] for _, lo in got])} "
            f"ms; client send lag p99 {spread([f['lag_p99'] for pair in got for f in pair])} ms; "
            f"loaded / alone per pair {listed(ratios)}; median over the {len(valid)} valid "
            f"pairs {statistics.median(valid) if valid else float('nan'):.2f} (goal <= 1.5; "
            f"p99 alone goal < 10 ms); worker stored "
            f"{listed([lo['stored_per_s'] for _, lo in got], '{:,.0f}')} events/s; gate CPU "
            f"{spread([a['cpu_us'] for a, _ in got], '{:.0f}')} us/decision alone"
        )
        verdicts[nice] = {
            "p99_alone": alone_p99,
            "p99_loaded": [lo["p99"] for _, lo in got],
            "ratios": ratios,
            "valid": [lo["valid"] for _, lo in got],
            "median_valid_ratio": statistics.median(valid) if valid else None,
        }
    for c in args.concurrency if rounds else []:
        got = [r[c] for r in rounds]
        ratios = [g["rps"] / b["rps"] for b, g in got]
        print(
            f"  c={c}: ratio gate / publishing baseline {spread(ratios)}"
            f"; gate {spread([g['rps'] for _, g in got], '{:,.0f}')} req/s, baseline "
            f"{spread([b['rps'] for b, _ in got], '{:,.0f}')} req/s; CPU per decision "
            f"{spread([g['cpu_us'] for _, g in got], '{:.0f}')} us, per baseline answer "
            f"{spread([b['cpu_us'] for b, _ in got], '{:.0f}')} us"
        )
    closed = {
        c: [r[c][1]["rps"] / r[c][0]["rps"] for r in rounds] for c in args.concurrency if rounds
    }
    print(
        json.dumps(
            {
                "python": platform.python_version(),
                "cores": os.cpu_count(),
                "floor_p99": floor["p99"],
                "open_loop": verdicts,
                "closed_ratios": closed,
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
            gate.env["MONITOR_GATE_NICE"] = str(args.gate_nice[0])  # set by the process itself
            stack.enter_context(running(gate))
            await gate.wait_ready()
            client = await Client.start()
            try:
                if not apply_nice(args.client_nice, client.proc.pid):
                    print(f"the client runs at nice 0 (could not set {args.client_nice})")
                run = Bench(args, gate, worker, client, bootstrap, topic, db_url)
                bodies = Bodies(args.conversations)
                headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
                connector = aiohttp.TCPConnector(limit=0)
                async with aiohttp.ClientSession(connector=connector) as session:
                    async with session.post(run.own, data=bodies.all[0], headers=headers) as r:
                        sample = await r.json()
                    print("sample answer:", json.dumps(sample)[:400])
                    print(
                        f"gate process nice value {os.getpriority(os.PRIO_PROCESS, gate.pid)}, "
                        f"autogroup: {autogroup(gate.pid)}; client nice "
                        f"{os.getpriority(os.PRIO_PROCESS, client.proc.pid)}, autogroup: "
                        f"{autogroup(client.proc.pid)}; kernel.sched_autogroup_enabled "
                        f"{autogroup_enabled()}"
                    )
                    await closed_loop(session, run.own, bodies, 4, 1.0)  # warm-up (history)
                    await closed_loop(
                        session, f"http://127.0.0.1:{gate.port}/bench/constant", bodies, 4, 1.0
                    )
                    await settle(db_url, (gate.pid, worker.pid))
                    ping = f"http://127.0.0.1:{gate.port}/bench/ping"
                    floor = await client.open_loop(ping, args.rate, args.open_seconds, method="GET")
                    print_floor(args.rate, floor)
                    pairs = await ab_pairs(run)
                    if not apply_nice(args.gate_nice[0], gate.pid):
                        raise SystemExit("could not reset the gate process's nice value")
                    rounds = await closed_rounds(session, run)
            finally:
                await client.close()
            gate_log = (workdir / "gate.log").read_text(errors="replace")
            if "Traceback" in gate_log:
                print(gate_log[-3000:])
    summary(floor, pairs, rounds, args)


def autogroup(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/autogroup").read_text().strip()
    return "none"


def autogroup_enabled() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    return "absent"


def print_floor(rate: float, f: dict[str, Any]) -> None:
    print(
        f"client floor, GET /bench/ping at {rate:.0f}/s: p50 {f['p50']:.2f} p99 {f['p99']:.2f} "
        f"p99.9 {f['p999']:.2f} ms, send lag p99 {f['lag_p99']:.2f} ms, client CPU "
        f"{f['client_cpu_us']:.0f} us/request ({f['client_cpu_share']:.0%} of a core)",
        flush=True,
    )


def print_open(when: str, f: dict[str, Any]) -> None:
    print(
        f"open loop {f['rate']:.0f} req/s {when} ({f['answers']:,} answers, achieved "
        f"{f['achieved']:.0f}/s): p50 {f['p50']:.2f} p99 {f['p99']:.2f} p99.9 {f['p999']:.2f} "
        f"max {f['max']:.1f} ms; in-handler p99 {f['server_p99']:.2f}; gate CPU "
        f"{f['cpu_us']:.0f} us/decision; worker CPU {f['worker_cpu_share']:.0%}; client CPU "
        f"{f['client_cpu_share']:.0%}, send lag p99 {f['lag_p99']:.2f} ms; load {f['load']:.1f}"
        f"; degraded {f['degraded']}; errors {sum(f['errors'].values())}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--open-seconds",
        type=float,
        default=20.0,
        help="Per open-loop phase (20: 10,000 answers at 500/s, a p99 of 100 answers).",
    )
    parser.add_argument("--pairs", type=int, default=5, help="Alone/loaded pairs per nice value.")
    parser.add_argument("--rate", type=float, default=500.0, help="Open-loop requests/s.")
    parser.add_argument("--seconds", type=float, default=5.0, help="Per closed-loop phase.")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="*",
        default=[1, 16, 64],
        help="Closed-loop clients (none: no closed loops).",
    )
    parser.add_argument("--repeat", type=int, default=3, help="Closed-loop rounds (3).")
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
        nargs="+",
        default=[-10],
        help="Nice values of the gate process (and its autogroup), each measured in every "
        "pair (e.g. `0 -10`); the first is MONITOR_GATE_NICE at start and is kept for the "
        "closed loops (-10: the product's default; 0: the same priority as the worker, "
        "broker, Postgres and load).",
    )
    parser.add_argument(
        "--client-nice",
        type=int,
        default=-10,
        help="Nice value of the open-loop client's process and autogroup (-10: its own waits "
        "for a core, which would count in every latency it measures, kept out of the gate's "
        "figures; the agents asking a gate run elsewhere). Needs root; refused: left at 0.",
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
