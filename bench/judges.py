"""LLM-judge throughput: verdict-producing conversations/s against a slow local model server.

A chat-completions server (aiohttp.web, in its own process so it shares neither the event loop
nor the CPU accounting with the judge) answers every ``POST /v1/chat/completions`` after a fixed
latency (200 ms by default) with a valid rubric object: one passing grade for every
``[item <id>]`` in the request's last message. Every repeat then runs, against that server and
on the same N simulated conversations (``Simulator`` events grouped with ``Conversation.of``):

- raw     a minimal httpx loop: C workers each posting the judge's exact request bodies
          (prebuilt with ``rubric.build_messages``) and decoding the completion, over the same
          pool layout the judge uses (``_own_clients``: pools of at most 8 connections);
- raw-1   the same loop over one ``httpx.AsyncClient`` with a single pool of C connections
          (the layout ``LLMJudge``'s docstring warns about; for comparison only);
- judge   ``LLMJudge`` (its own clients, ``max_concurrency=C``) with C conversations in flight;
          a conversation counts once all its verdicts are ``ok``.

The ideal rate is C / latency (each request is served in exactly ``latency`` seconds and C are
always in flight); ratios are judge / ideal (the issue's goal: >= 0.9) and judge / raw (how much
the judge costs on top of the transport). Each phase builds its own clients (timed apart, as
"client setup") and opens its connections with one untimed warm-up wave of C requests, so the
figure is the steady state of a long-running worker; ``--cold`` times construction and connection
set-up too. Figures are the median over repeats. Run from the repository root::

    .venv/bin/python bench/judges.py                  # 640 conversations, C=64, 200 ms, 3 repeats
    .venv/bin/python bench/judges.py --cold --conversations 3200
    .venv/bin/python bench/judges.py --conversations 1280 --concurrency 128 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.harness import CpuMeter, markdown_table
from monitor.judges import llm as llm_module
from monitor.judges import rubric
from monitor.judges.base import Conversation
from monitor.judges.llm import LLMJudge, LLMJudgeConfig
from monitor.sim.traffic import Simulator

MODEL = "bench-judge"
PHASES = ("raw", "raw-1", "judge")
_ITEM = re.compile(r"\[item ([^\]\s]+)\]")


# --- the model server (child process) -------------------------------------------------------


def _grades(content: str) -> str:
    items = [
        {
            "item_id": item_id,
            "correctness": 0.9,
            "informativeness": 0.8,
            "consistency": 1.0,
            "label": 1,
            "categories": [],
            "fabrication_type": None,
            "rationale": "Looks right.",
        }
        for item_id in _ITEM.findall(content)
    ]
    return json.dumps({"items": items})


def _serve(latency_s: float, conn: Connection) -> None:
    """Child process: serve until the parent closes ``conn``; sends (port, pid) when ready."""
    from aiohttp import web

    stats = {"requests": 0, "in_flight": 0, "max_in_flight": 0}

    async def complete(request: web.Request) -> web.Response:
        stats["requests"] += 1
        stats["in_flight"] += 1
        stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
        try:
            body = await request.json()
            await asyncio.sleep(latency_s)
            content = _grades(str(body["messages"][-1].get("content") or ""))
            return web.json_response(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", MODEL),
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": content},
                        }
                    ],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                }
            )
        finally:
            stats["in_flight"] -= 1

    async def read_stats(request: web.Request) -> web.Response:
        out = dict(stats)
        stats["requests"] = stats["max_in_flight"] = 0
        return web.json_response(out)

    async def main() -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", complete)
        app.router.add_get("/stats", read_stats)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        conn.send((port, os.getpid()))
        loop = asyncio.get_running_loop()
        closed = loop.create_future()
        loop.add_reader(conn.fileno(), lambda: closed.done() or closed.set_result(None))
        await closed  # EOF (or anything) from the parent: stop
        await runner.cleanup()

    asyncio.run(main())


class ModelServer:
    """The server process; ``with ModelServer(0.2) as server: server.base_url``."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(latency_s, child), daemon=True)
        self._child = child
        self.port = self.pid = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ModelServer:
        self._proc.start()
        self._child.close()
        if not self._conn.poll(60):
            self._proc.kill()
            raise RuntimeError("the model server did not start within 60 s")
        self.port, self.pid = self._conn.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.close()
        self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()

    async def stats(self) -> dict[str, int]:
        """Requests and most in flight since the previous call."""
        async with httpx.AsyncClient() as client:
            resp = await client.get(f"http://127.0.0.1:{self.port}/stats")
            return dict(resp.json())


# --- phases ---------------------------------------------------------------------------------


@dataclass
class Phase:
    """One timed phase of one repeat."""

    wall: float
    done: int  # conversations that produced verdicts (raw: completions decoded)
    cpu: dict[str, float]  # CPU seconds: "bench" (this process), "server"
    requests: int
    max_in_flight: int
    setup: float  # seconds to build the client(s) (inside ``wall`` only with --cold)


@dataclass
class Run:
    n: int
    concurrency: int
    latency_s: float
    phases: dict[str, Phase] = field(default_factory=dict)

    @property
    def ideal(self) -> float:
        return self.concurrency / self.latency_s

    def rate(self, phase: str) -> float:
        p = self.phases[phase]
        return p.done / p.wall


One = Callable[[int], Awaitable[bool]]  # handles conversation i; True once it succeeded


async def _pump(n: int, concurrency: int, one: One) -> int:
    """Run ``one(0..n-1)`` with ``concurrency`` workers; returns how many returned True."""
    next_index, done = 0, 0

    async def worker() -> None:
        nonlocal next_index, done
        while next_index < n:
            i, next_index = next_index, next_index + 1
            ok = await one(i)  # not `done += await ..`: that reads `done` before awaiting
            done += ok

    await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))
    return done


def _request_bodies(conversations: Sequence[Conversation]) -> list[bytes]:
    """The bodies ``LLMJudge`` sends, JSON-encoded once up front (the raw loop's input)."""
    return [
        json.dumps(
            {
                "model": MODEL,
                "messages": rubric.build_messages(c),
                "temperature": 0,
                "response_format": {"type": "json_object"},
            }
        ).encode()
        for c in conversations
    ]


@contextlib.asynccontextmanager
async def raw_client(
    url: str, bodies: Sequence[bytes], concurrency: int, single: bool
) -> AsyncIterator[One]:
    """Posts body i and decodes the completion; over one pool of ``concurrency`` connections
    (``single``) or over the judge's own layout (ceil(C / 8) pools of at most 8)."""
    if single:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        clients = [httpx.AsyncClient(limits=limits)]
    else:
        cfg = LLMJudgeConfig(base_url=url, model=MODEL, max_concurrency=concurrency)
        clients = llm_module._own_clients(cfg, None)
    load = [0] * len(clients)
    headers = {"Content-Type": "application/json"}

    async def one(i: int) -> bool:
        shard = load.index(min(load))  # least loaded pool, as LLMJudge picks
        load[shard] += 1
        try:
            resp = await clients[shard].post(url, content=bodies[i], headers=headers, timeout=30)
        finally:
            load[shard] -= 1
        resp.raise_for_status()
        return isinstance(resp.json()["choices"][0]["message"]["content"], str)

    try:
        yield one
    finally:
        for client in clients:
            await client.aclose()


@contextlib.asynccontextmanager
async def judge_client(
    base_url: str, conversations: Sequence[Conversation], concurrency: int
) -> AsyncIterator[One]:
    """``LLMJudge`` (its own clients) on conversation i: True when it returned verdicts and
    all of them are ``ok``."""
    config = LLMJudgeConfig(
        base_url=base_url, model=MODEL, max_concurrency=concurrency, timeout=30.0
    )
    async with LLMJudge(config) as judge:

        async def one(i: int) -> bool:
            verdicts = await judge.judge(conversations[i])
            return bool(verdicts) and all(v.status == "ok" for v in verdicts)

        yield one


async def timed(
    server: ModelServer,
    meter: CpuMeter,
    make: Callable[[], Any],
    n: int,
    concurrency: int,
    cold: bool,
) -> Phase:
    """Build the client (``make()``, timed as ``setup``), warm it up with ``concurrency``
    requests unless ``cold``, then time ``n`` conversations with ``concurrency`` in flight.
    ``cold`` puts construction and connection set-up inside the timed window."""
    await server.stats()  # reset the server's counters
    t0, cpu0 = time.perf_counter(), meter.snapshot()
    async with make() as one:
        setup = time.perf_counter() - t0
        if not cold:
            await _pump(min(concurrency, n), concurrency, one)  # opens the connections
            await server.stats()
            t0, cpu0 = time.perf_counter(), meter.snapshot()
        done = await _pump(n, concurrency, one)
        wall = time.perf_counter() - t0
        cpu = meter.spent(cpu0, meter.snapshot())
    stats = await server.stats()
    return Phase(wall, done, cpu, stats["requests"], stats["max_in_flight"], setup)


async def bench(
    args: argparse.Namespace, server: ModelServer, conversations: list[Conversation]
) -> list[Run]:
    meter = CpuMeter({"bench": os.getpid(), "server": server.pid})
    url = server.base_url + "/chat/completions"
    bodies = _request_bodies(conversations)
    c, n = args.concurrency, len(conversations)
    runs = []
    for i in range(1, args.repeat + 1):
        run = Run(n, c, args.latency_ms / 1000)
        makers = {
            "raw": lambda: raw_client(url, bodies, c, single=False),
            "raw-1": lambda: raw_client(url, bodies, c, single=True),
            "judge": lambda: judge_client(server.base_url, conversations, c),
        }
        for name, make in makers.items():
            run.phases[name] = await timed(server, meter, make, n, c, args.cold)
        for name, phase in run.phases.items():
            if phase.done != n:
                raise RuntimeError(f"{name}: only {phase.done} of {n} conversations succeeded")
        print(
            f"repeat {i}/{args.repeat}: "
            + ", ".join(f"{p} {run.rate(p):,.0f}/s" for p in PHASES)
            + f"; judge/ideal {run.rate('judge') / run.ideal:.2f}",
            flush=True,
        )
        runs.append(run)
    return runs


# --- reporting ------------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def rate_table(runs: list[Run]) -> str:
    head = [
        "run",
        "raw conv/s",
        "raw-1 conv/s",
        "judge conv/s",
        "ideal conv/s",
        "judge / ideal",
        "judge / raw",
        "raw / ideal",
    ]

    def row(name: str, rates: list[float], ideal: float) -> list[str]:
        raw, _raw1, judge = rates
        ratios = (judge / ideal, judge / raw, raw / ideal)
        return [name, *(f"{r:,.1f}" for r in (*rates, ideal)), *(f"{r:.3f}" for r in ratios)]

    rows = [row(str(i), [r.rate(p) for p in PHASES], r.ideal) for i, r in enumerate(runs, 1)]
    rows.append(
        row("**median**", [_median([r.rate(p) for r in runs]) for p in PHASES], runs[0].ideal)
    )
    return markdown_table(head, rows)


def cpu_table(runs: list[Run]) -> str:
    n = runs[0].n
    waves = -(-n // runs[0].concurrency)
    head = [
        "phase",
        "wall s",
        "ms per wave",
        "bench CPU s",
        "server CPU s",
        "bench CPU ms/conv",
        "requests",
        "most in flight",
        "client setup ms",
    ]
    rows: list[list[str]] = []
    for phase in PHASES:
        ps = [r.phases[phase] for r in runs]
        bench_cpu = _median([p.cpu["bench"] for p in ps])
        wall = _median([p.wall for p in ps])
        rows.append(
            [
                phase,
                f"{wall:.2f}",
                f"{wall / waves * 1000:.0f}",
                f"{bench_cpu:.2f}",
                f"{_median([p.cpu['server'] for p in ps]):.2f}",
                f"{bench_cpu / n * 1000:.2f}",
                f"{_median([p.requests for p in ps]):.0f}",
                f"{_median([p.max_in_flight for p in ps]):.0f}",
                f"{_median([p.setup for p in ps]) * 1000:.0f}",
            ]
        )
    return markdown_table(head, rows)


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/judges.py",
        description="LLMJudge verdict-producing conversations/s against a local chat-completions "
        "server (own process) that answers after a fixed latency, as a ratio to the ideal "
        "(concurrency / latency) and to a raw httpx loop posting the same requests at the same "
        "concurrency, measured in the same run.",
    )
    p.add_argument(
        "--conversations",
        type=int,
        default=640,
        help="simulated conversations judged per phase (640)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=64,
        help="conversations in flight, and the judge's max_concurrency (64)",
    )
    p.add_argument(
        "--latency-ms",
        type=float,
        default=200.0,
        help="the server's delay before each answer, in ms (200)",
    )
    p.add_argument("--repeat", type=int, default=3, help="repeats; medians are reported (3)")
    p.add_argument("--seed", type=int, default=7, help="simulator seed (7)")
    p.add_argument(
        "--cold",
        action="store_true",
        help="time from building the HTTP clients, without a warm-up (default: "
        "clients built and connections opened by one warm-up wave before the timer)",
    )
    args = p.parse_args(argv)
    if args.conversations < 1 or args.concurrency < 1 or args.repeat < 1:
        p.error("--conversations, --concurrency and --repeat must be >= 1")
    if args.latency_ms <= 0:
        p.error("--latency-ms must be > 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sim = Simulator(args.seed, datetime(2025, 1, 1, tzinfo=UTC))
    conversations = [Conversation.of(events) for events in sim.conversations(args.conversations)]
    items = sum(len(c.assistant_messages()) for c in conversations)
    kib = sum(len(b) for b in _request_bodies(conversations)) / len(conversations) / 1024
    print(
        f"{len(conversations)} conversations ({items} assistant messages, "
        f"{kib:.1f} KiB per request), concurrency {args.concurrency}, "
        f"server latency {args.latency_ms:.0f} ms, {args.repeat} repeats; "
        f"{os.cpu_count()} cores, Python {platform.python_version()}",
        flush=True,
    )
    with ModelServer(args.latency_ms / 1000) as server:
        try:
            runs = asyncio.run(bench(args, server, conversations))
        except KeyboardInterrupt:
            print("interrupted; the server was stopped", file=sys.stderr)
            return 130
    print(f"\n{rate_table(runs)}\n\n{cpu_table(runs)}\n")
    judge = _median([r.rate("judge") / r.ideal for r in runs])
    vs_raw = _median([r.rate("judge") / r.rate("raw") for r in runs])
    print(
        f"median judge / ideal = {judge:.3f} (goal >= 0.9: {'met' if judge >= 0.9 else 'missed'})"
        f"; judge / raw httpx = {vs_raw:.3f}"
    )
    print(
        "raw = httpx over the judge's pool layout (pools of <= 8 connections); raw-1 = httpx "
        "with one pool of --concurrency connections; conv/s = conversations with verdicts "
        "(raw: completions decoded) per second"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
