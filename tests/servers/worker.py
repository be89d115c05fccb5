"""Test harness: the real worker as a subprocess, producing events, polling Postgres."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from monitor.contract.events import AgentEvent
from monitor.sdk import EventEmitter
from monitor.stack.ports import free_port
from monitor.store.engine import libpq_url


class WorkerProcess:
    """``python -m monitor.cli worker`` with its own env, web port and log file."""

    def __init__(
        self,
        bootstrap: str,
        database_url: str,
        topic: str,
        state_dir: Path,
        group: str | None = None,
        **extra_env: str,
    ) -> None:
        self.port = free_port()
        self.grpc_port = free_port()  # OTLP/gRPC (4317 by default: taken by the first worker)
        self.log_path = state_dir / f"worker-{self.port}.log"
        state_dir.mkdir(parents=True, exist_ok=True)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")},
            "MONITOR_ENV_FILE": "",  # no dotenv file either
            "MONITOR_KAFKA_BOOTSTRAP": bootstrap,
            "DATABASE_URL": database_url,
            "MONITOR_KAFKA_IDEMPOTENT": "false",
            "MONITOR_WEB_PORT": str(self.port),
            "MONITOR_OTLP_GRPC_PORT": str(self.grpc_port),
            "MONITOR_STATE_DIR": str(state_dir),
            "MONITOR_TOPIC_EVENTS": topic,
            "MONITOR_TOPIC_DLQ": f"{topic}.dlq",
            "MONITOR_CONSUMER_GROUP": group or f"g-{topic}",
            "MONITOR_APP_ID": f"app-{topic}",
            "MONITOR_TOPIC_JUDGE_REQUESTS": f"{topic}.judge",
            "MONITOR_JUDGE_CONSUMER_GROUP": f"gj-{topic}",
            "MONITOR_JUDGE_IDLE_S": "1",
            "MONITOR_JUDGE_ARRIVAL_IDLE_S": "1",
            "MONITOR_JUDGE_SCHEDULE_INTERVAL_S": "1",
            "MONITOR_STORE_RETRY_MAX_S": "2",
            **extra_env,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.loglevel = os.environ.get("TEST_WORKER_LOGLEVEL", "warning")
        self.gate: GateProcess | None = None  # the gate process beside it, if one was started

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def gate_url(self) -> str:
        """The URL of the gate process started beside this worker (:func:`running_gate_worker`)."""
        assert self.gate is not None, "no gate process beside this worker"
        return self.gate.url

    @property
    def grpc_target(self) -> str:
        """Where its OTLP/gRPC receiver listens (``host:port``)."""
        return f"127.0.0.1:{self.grpc_port}"

    def start(self) -> WorkerProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "monitor.cli", "worker", "--loglevel", self.loglevel],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        return self

    async def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise AssertionError(f"worker died:\n{self.log_tail()}")
                try:
                    if (await client.get(f"{self.url}/health")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        raise AssertionError(f"worker not ready in {timeout}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


#: a worker that only ingests and answers on HTTP: no judging, no alerting
QUIET = {"MONITOR_JUDGE_ENABLED": "false", "MONITOR_ALERTING_ENABLED": "false"}


@asynccontextmanager
async def running_worker(
    bootstrap: str, database_url: str, topic: str, tmp: Path, **env: str
) -> AsyncIterator[WorkerProcess]:
    """A worker process on ``topic`` (created first) with ``env``, ready (``/health`` answers);
    stopped on exit."""
    await create_topic(bootstrap, topic)
    worker = WorkerProcess(bootstrap, database_url, topic, tmp, **env).start()
    try:
        await worker.wait_ready()
        yield worker
    finally:
        worker.stop()


@asynccontextmanager
async def running_gate_worker(
    bootstrap: str, database_url: str, topic: str, tmp: Path, policy: str, **env: str
) -> AsyncIterator[WorkerProcess]:
    """:func:`running_worker` without judges and alerting (``QUIET``, unless ``env`` says
    otherwise), and the gate process (``monitor gate serve``, the same environment, started
    once the worker made the origin key) as ``worker.gate``, both gating by ``policy`` (the
    YAML, written to ``tmp/gate.yaml``). The worker answers ``/v1/gate`` with 404: ask
    ``worker.gate.url``."""
    path = tmp / "gate.yaml"
    path.write_text(policy)
    settings = {**QUIET, "MONITOR_GATE_POLICY_FILE": str(path), **env}
    async with running_worker(bootstrap, database_url, topic, tmp, **settings) as worker:
        gate = GateProcess(bootstrap, database_url, topic, tmp, **settings)
        try:
            await gate.start().wait_ready()
            worker.gate = gate
            yield worker
        finally:
            gate.stop()


def metric(worker: WorkerProcess, name: str) -> float:
    """The value of an unlabelled metric from the worker's /metrics."""
    for line in httpx.get(f"{worker.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


async def create_topics(bootstrap: str, *topics: tuple[str, int]) -> None:
    """Create each ``(name, partitions)`` topic, replication factor 1."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in topics])
    finally:
        await admin.close()


async def create_topic(bootstrap: str, topic: str, partitions: int = 4) -> None:
    """``topic`` with ``partitions`` and its one-partition ``.dlq``."""
    await create_topics(bootstrap, (topic, partitions), (f"{topic}.dlq", 1))


async def read_topic(
    bootstrap: str, topic: str, max_records: int | None = None, timeout_ms: int = 5000
) -> list[ConsumerRecord[bytes, bytes]]:
    """The records one fetch from the start of ``topic`` returns within ``timeout_ms``."""
    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await c.start()
    try:
        got = await c.getmany(timeout_ms=timeout_ms, max_records=max_records)
    finally:
        await c.stop()
    return [r for rs in got.values() for r in rs]


async def send_events(
    bootstrap: str, topic: str, events: Iterable[AgentEvent], rate: float | None = None
) -> int:
    """Send ``events`` with the SDK (optionally at ``rate`` events/s); returns how many."""
    n = 0
    started = time.monotonic()
    async with EventEmitter(bootstrap, topic, idempotent=False) as em:
        for event in events:
            await em.send(event)
            n += 1
            if rate and n % 100 == 0:
                ahead = n / rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        await em.flush()
    return n


async def count(url: str, sql: str = "SELECT count(*) FROM events") -> int:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


async def wait_for_count(
    url: str,
    want: int,
    sql: str = "SELECT count(*) FROM events",
    timeout: float = 90,
    stable_s: float = 0.0,
) -> int:
    """Poll until ``sql`` returns ``want`` (then wait ``stable_s`` more and re-read)."""
    deadline = time.monotonic() + timeout
    n = -1
    while time.monotonic() < deadline:
        try:
            n = await count(url, sql)
        except (OSError, asyncpg.PostgresError):
            n = -1
        if n >= want:
            if stable_s:
                await asyncio.sleep(stable_s)
                n = await count(url, sql)
            return n
        await asyncio.sleep(0.2)
    return n


class GateProcess(WorkerProcess):
    """``python -m monitor.cli gate serve``: the gate as a process of its own, on its own port
    (same environment as the worker: broker, database, topic, state directory)."""

    def __init__(self, *args: Any, **kwargs: str) -> None:
        super().__init__(*args, **kwargs)
        self.log_path = self.log_path.with_name(f"gate-{self.port}.log")
        self.env["MONITOR_GATE_PORT"] = str(self.port)

    def start(self) -> GateProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "monitor.cli", "gate", "serve", "--loglevel", self.loglevel],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        return self
