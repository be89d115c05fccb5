"""Gate speed: requests/s and p50/p99 latency of ``POST /v1/gate`` against a constant answer.

One real worker (judges and alerting off, the gate's decision events published and ingested as
usual), started as ``bench/gate_worker.py``: the worker plus ``POST /bench/constant``. The
request is an agent's next message with the conversation so far (a user message, two tool calls,
one failed tool result: 5 history events, ~1.7 KB), so the four deterministic checks run inline
on every request (two of them fire). Requests cycle over ``--conversations`` distinct
conversation ids (each re-sending its history, as an agent does: after the first round the
worker's history cache holds the events). The baseline is *the same web server answering a
constant JSON*: the same bodies POSTed to ``/bench/constant`` on the same worker, which reads
the body like the gate and answers a constant gate-sized JSON (200) without deciding. Both are
measured in the same run, alternately, at each concurrency (closed loop: ``c`` clients each
sending the next request when the previous answer arrived) for ``--seconds`` each; then an
open-loop phase sends at a fixed ``--rate`` (requests started every 1/rate s whatever the
answers) to check the goal "p99 under 10 ms at 500 requests/s": once before the closed-loop
phases (steady state: the goal) and once after them (the 64-client phase saturates the
worker; its decision events are still being published, ingested and maybe replayed from the
disk buffer while the second open loop runs: that one measures recovery from overload).
The gate process (``monitor gate serve``, its own event loop, no ingest in it) runs beside
the worker on the same broker, database and state directory; the same open loop is sent to it
(``gate process``), before and after the closed-loop phases, and its closed loop at each
concurrency is printed beside the worker's. Latency is measured by the client (aiohttp) from
the request start to the full answer; the client runs on the same 2 cores as the worker, the
broker and Postgres. The 1-minute load average is printed per phase (other sessions may share
the machine). Run from the repository root::

    .venv/bin/python bench/gate.py                  # 1/16/64 clients, 5 s each, 500 req/s
    .venv/bin/python bench/gate.py --seconds 3 --rate 300
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

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
        worker = Worker(
            bootstrap,
            db_url,
            topic,
            workdir / "worker.log",
            extra,
            argv=(str(REPO / "bench" / "gate_worker.py"),),
        )
        with running(worker), contextlib.ExitStack() as stack:
            await worker.wait_ready()
            serve = ("-m", "monitor.cli", "gate", "serve")
            process = Worker(bootstrap, db_url, topic, workdir / "gate.log", extra, argv=serve)
            process.env["MONITOR_GATE_PORT"] = str(process.port)
            process.env["MONITOR_STATE_DIR"] = worker.env["MONITOR_STATE_DIR"]  # origin key
            stack.enter_context(running(process))
            await process.wait_ready()
            own = f"http://127.0.0.1:{process.port}/v1/gate"
            url = f"http://127.0.0.1:{worker.port}/v1/gate"
            constant = f"http://127.0.0.1:{worker.port}/bench/constant"
            bodies = Bodies(args.conversations)
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                async with session.post(
                    url,
                    data=bodies.all[0],
                    headers={
                        "Authorization": f"Bearer {TOKEN}",
                        "Content-Type": "application/json",
                    },
                ) as r:
                    sample = await r.json()
                print("sample answer:", json.dumps(sample)[:400])
                await closed_loop(session, url, bodies, 4, 1.0)  # warm-up (history cached)
                await closed_loop(session, own, bodies, 4, 1.0)
                await closed_loop(session, constant, bodies, 4, 0.5)
                await asyncio.sleep(2)  # the warm-up's decision events ingested
                steady = await open_loop(session, url, bodies, args.rate, args.seconds)
                print_open("steady state", steady)
                alone = await open_loop(session, own, bodies, args.rate, args.seconds)
                print_open("gate process, steady state", alone)
                rows = []
                for c in args.concurrency:
                    base = await closed_loop(session, constant, bodies, c, args.seconds)
                    gate = await closed_loop(session, url, bodies, c, args.seconds)
                    lane = await closed_loop(session, own, bodies, c, args.seconds)
                    print(
                        f"c={c}: gate process {lane['rps']:,.0f} req/s p50 "
                        f"{lane['p50']:.2f} p99 {lane['p99']:.2f} ms | ratio to baseline "
                        f"{lane['rps'] / base['rps']:.2f} | degraded {lane['degraded']}",
                        flush=True,
                    )
                    assert set(lane["statuses"]) == {200}, lane["statuses"]
                    assert set(base["statuses"]) == {200}, base["statuses"]
                    assert set(gate["statuses"]) == {200}, gate["statuses"]
                    rows.append((c, base, gate))
                    print(
                        f"c={c}: baseline {base['rps']:,.0f} req/s p50 {base['p50']:.2f} "
                        f"p99 {base['p99']:.2f} ms | gate {gate['rps']:,.0f} req/s p50 "
                        f"{gate['p50']:.2f} p99 {gate['p99']:.2f} ms | ratio "
                        f"{gate['rps'] / base['rps']:.2f} | load {base['load']:.1f}/"
                        f"{gate['load']:.1f} | degraded {gate['degraded']}",
                        flush=True,
                    )
                fixed = await open_loop(session, url, bodies, args.rate, args.seconds)
                print_open("after the closed-loop phases", fixed)
                after = await open_loop(session, own, bodies, args.rate, args.seconds)
                print_open("gate process, after the closed-loop phases", after)
    print(
        "\n| clients | baseline req/s | baseline p50 / p99 ms | gate req/s | gate p50 / p99 ms"
        " | gate / baseline |\n|---|---|---|---|---|---|"
    )
    for c, base, gate in rows:
        print(
            f"| {c} | {base['rps']:,.0f} | {base['p50']:.2f} / {base['p99']:.2f} | "
            f"{gate['rps']:,.0f} | {gate['p50']:.2f} / {gate['p99']:.2f} | "
            f"{gate['rps'] / base['rps']:.2f} |"
        )
    print(
        json.dumps(
            {
                "python": platform.python_version(),
                "cores": os.cpu_count(),
                "median_ratio": statistics.median(g["rps"] / b["rps"] for _, b, g in rows),
                "open_loop": steady,
                "open_loop_after_saturation": fixed,
                "gate_process_open_loop": alone,
                "gate_process_open_loop_after_saturation": after,
            }
        )
    )


def print_open(when: str, f: dict[str, Any]) -> None:
    print(
        f"open loop {f['rate']:.0f} req/s, {when} (achieved {f['achieved']:.0f}): p50 "
        f"{f['p50']:.2f} ms, p99 {f['p99']:.2f} ms; in-server latency_ms p50 "
        f"{f['server_p50']:.2f}, p99 {f['server_p99']:.2f}; load {f['load']:.1f}; "
        f"degraded {f['degraded']}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="Per phase.")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--rate", type=float, default=500.0, help="Open-loop requests/s.")
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
