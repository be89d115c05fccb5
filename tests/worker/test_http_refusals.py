"""Refuse before working, on the real worker (subprocess, real broker and Postgres).

A stranger's gzip bomb, a bomb with the right token and a 10,000-event batch must not hold the
worker's event loop: a prober asks ``GET /health`` in a loop meanwhile and its slowest answer is
bounded. Protocol limits: JSON for malformed requests and for aiohttp's own
errors, 415 for other media types, 429 with ``Retry-After`` past the rates (OTLP's status body
on ``/v1/traces``), a trickling body cut with 408, idle and half-sent connections closed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.rpc import status_pb2

from tests.factories import event_dict
from tests.servers.worker import WorkerProcess, count, create_topic, wait_for_count

pytestmark = pytest.mark.timing  # latency bounds: run alone (see pyproject.toml)

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOMB_INFLATED = 1 << 30  # 1 GiB of zeros, about 1 MiB compressed


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """A gzip body that inflates to 1 GiB (compressed piece by piece, never held inflated)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    parts = [z.compress(block) for _ in range(BOMB_INFLATED // len(block))]
    parts.append(z.flush())
    return b"".join(parts)


async def start_worker(
    broker: Any, topic: str, database_url: str, tmp: Path, **env: str
) -> WorkerProcess:
    await create_topic(broker.bootstrap, topic)
    w = WorkerProcess(
        broker.bootstrap,
        database_url,
        topic,
        tmp,
        MONITOR_INGEST_TOKEN=TOKEN,
        MONITOR_JUDGE_ENABLED="false",
        MONITOR_ALERTING_ENABLED="false",
        **env,
    ).start()
    await w.wait_ready()
    # settled: one event through HTTP and Kafka into Postgres (the ingest group joined, the
    # writer warm), so the latencies measured are the refusals', not the start-up's
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.post(
            f"{w.url}/v1/events", json=[event_dict("settle-1", "settle")], headers=AUTH
        )
        assert r.status_code == 202, r.text
    sql = "SELECT count(*) FROM events WHERE conversation_id = 'settle'"
    assert await wait_for_count(database_url, 1, sql) == 1
    return w


@pytest.fixture
async def worker(
    broker: Any, topic_name: str, database_url: str, tmp_path: Path
) -> AsyncIterator[WorkerProcess]:
    w = await start_worker(broker, topic_name, database_url, tmp_path)
    try:
        yield w
    finally:
        w.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime, stime in clock ticks


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class LoopProber:
    """Asks the worker's ``GET /health`` (answered on its event loop) one request at a time;
    keeps latencies.

    It runs in a thread of its own with a synchronous client, so what the test's event loop
    does meanwhile (sending bombs, building clients) is not counted as the worker's latency.
    """

    def __init__(self, url: str) -> None:
        self.url = f"{url}/health"
        self.latencies: list[float] = []
        self.statuses: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                r = client.get(self.url)
                self.latencies.append(time.perf_counter() - t0)
                self.statuses.add(r.status_code)
                self._stop.wait(0.01)

    async def __aenter__(self) -> LoopProber:
        self._thread = threading.Thread(target=self._run, name="loop-prober", daemon=True)
        self._thread.start()
        await asyncio.sleep(0.3)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        await asyncio.to_thread(self._thread.join, 30)

    @property
    def worst(self) -> float:
        return max(self.latencies)


async def post_bomb(
    client: httpx.AsyncClient, url: str, body: bytes, token: str
) -> tuple[int, dict[str, Any], float]:
    t0 = time.perf_counter()
    r = await client.post(
        url,
        content=body,
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        },
    )
    return r.status_code, r.json(), time.perf_counter() - t0


async def test_gzip_bombs_are_refused_without_stalling_the_loop(
    worker: WorkerProcess, bomb: bytes
) -> None:
    assert worker.proc is not None
    pid = worker.proc.pid
    events = f"{worker.url}/v1/events"
    # one client, built before anything is measured (each client costs an SSL context)
    async with httpx.AsyncClient(timeout=60) as client, LoopProber(worker.url) as prober:
        await asyncio.sleep(0.5)
        # sixteen strangers at once: each 401 before a byte of the body is inflated
        cpu0, mark = cpu_seconds(pid), len(prober.latencies)
        answers = await asyncio.gather(
            *(post_bomb(client, events, bomb, "wrong") for _ in range(16))
        )
        await asyncio.sleep(1.0)  # anything the worker still does after answering shows here
        stranger_cpu = cpu_seconds(pid) - cpu0
        stranger_worst = max(prober.latencies[mark:])
        for status, body, took in answers:
            assert status == 401 and body["reason"] == "unauthorized", body
            assert took < 5.0, took
        # the right token: 413 once the inflated size passes the limit, not 1 GiB later
        rss0, cpu0, mark = rss_bytes(pid), cpu_seconds(pid), len(prober.latencies)
        answers = await asyncio.gather(*(post_bomb(client, events, bomb, TOKEN) for _ in range(4)))
        await asyncio.sleep(1.0)
        bomb_cpu, rss_growth = cpu_seconds(pid) - cpu0, rss_bytes(pid) - rss0
        bomb_worst = max(prober.latencies[mark:])
        for status, body, took in answers:
            assert status == 413 and body["reason"] == "too_large", body
            assert took < 5.0, took
    assert prober.statuses == {200}
    # Measured on two shared cores (worker CPU s / slowest answer s): inflating in
    # aiohttp's parser cost 0.5-0.7 / 0.45 for eight strangers and 3.2 / 4.5-6 for four right
    # tokens; refusing first costs 0.09 / 0.05 and 0.16 / 0.05 (the worker's own background
    # work included). The bounds sit between.
    assert stranger_cpu < 0.6, stranger_cpu
    assert stranger_worst < 0.3, stranger_worst
    assert bomb_cpu < 1.0, bomb_cpu
    assert bomb_worst < 0.3, bomb_worst
    assert rss_growth < 200 * 1024 * 1024, rss_growth


async def test_a_10000_event_batch_does_not_stall_the_loop(
    worker: WorkerProcess, database_url: str
) -> None:
    worst: list[float] = []
    async with httpx.AsyncClient(timeout=120) as client:
        for round_ in range(3):
            batch = [
                event_dict(f"big-{round_}-{i}", f"bc-{i % 50}", at=i, content="y" * 500)
                for i in range(10_000)
            ]
            body = json.dumps(batch).encode()
            assert len(body) > 6_000_000
            async with LoopProber(worker.url) as prober:
                r = await client.post(
                    f"{worker.url}/v1/events",
                    content=body,
                    headers={**AUTH, "Content-Type": "application/json"},
                )
                await asyncio.sleep(0.3)
            assert r.status_code == 202, r.text[:300]
            assert r.json()["accepted"] == 10_000
            assert prober.statuses == {200}
            worst.append(prober.worst)
    # Parsed and validated on the event loop, each batch held the loop 0.4-0.9 s here (2.5 s
    # elsewhere); in the parse threads the slowest answer was about 0.1 s. The median of
    # three batches is bounded (one noisy neighbour on a shared machine cannot decide it).
    assert sorted(worst)[1] < 0.3, worst
    assert max(worst) < 1.0, worst
    sql = "SELECT count(*) FROM events WHERE conversation_id LIKE 'bc-%'"
    assert await wait_for_count(database_url, 30_000, sql, timeout=180) == 30_000


def raw_exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` on a fresh connection; everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def split_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return int(lines[0].split()[1]), headers, body


async def test_protocol_limits_answer_json_and_close_slow_connections(
    broker: Any, topic_name: str, database_url: str, tmp_path: Path
) -> None:
    w = await start_worker(
        broker,
        topic_name,
        database_url,
        tmp_path,
        MONITOR_API_TOKEN="r3ad",
        MONITOR_HTTP_IDLE_TIMEOUT_S="2",
        MONITOR_HTTP_READ_TIMEOUT_S="2",
        MONITOR_HTTP_INGEST_RATE_PER_S="1",
        MONITOR_HTTP_INGEST_RATE_BURST="5",
        MONITOR_HTTP_READ_RATE_PER_S="1",
        MONITOR_HTTP_READ_RATE_BURST="3",
        MONITOR_HTTP_UNAUTH_RATE_PER_S="1",
        MONITOR_HTTP_UNAUTH_RATE_BURST="10",
    )
    try:
        await protocol_limits(w)
    finally:
        w.stop()


async def protocol_limits(w: WorkerProcess) -> None:
    loop = asyncio.get_running_loop()
    # a malformed request line and a malformed header: aiohttp's parser refuses, answered in
    # JSON with a reason (tests/gate/test_refused_requests.py sends every refusal path)
    for raw, reason in (
        (b"GARBAGE\r\n\r\n", "bad_method"),
        (b"POST /v1/events HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", "bad_header"),
        (
            b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
            "bad_content_length",
        ),
    ):
        status, headers, body = split_response(
            await loop.run_in_executor(None, raw_exchange, w.port, raw)
        )
        assert status == 400 and headers["content-type"].startswith("application/json"), raw
        assert json.loads(body)["reason"] == reason
    async with httpx.AsyncClient(timeout=30) as client:
        # the router's own errors: JSON too
        r = await client.get(f"{w.url}/nowhere")
        assert r.status_code == 404 and r.json()["reason"] == "http_404"
        r = await client.get(f"{w.url}/v1/events")
        assert r.status_code == 405 and "error" in r.json(), r.text
        # other media types: 415 JSON, before the body is read
        r = await client.post(
            f"{w.url}/v1/events", content=b"a,b", headers={**AUTH, "Content-Type": "text/csv"}
        )
        assert r.status_code == 415 and r.json()["reason"] == "unsupported_media", r.text
        # the gate is the gate process's: a 404 saying where
        r = await client.post(f"{w.url}/v1/gate", json={"content": "x"}, headers=AUTH)
        assert r.status_code == 404 and r.json()["reason"] == "gate_elsewhere", r.text
        r = await client.post(
            f"{w.url}/v1/events",
            content=b"[]",
            headers={**AUTH, "Content-Type": "application/json", "Content-Encoding": "br"},
        )
        assert r.status_code == 415 and r.json()["reason"] == "unsupported_encoding"

        # the ingest credential's rate (1/s, burst 5; 3 requests above): /v1/traces 429 with
        # OTLP's google.rpc.Status and Retry-After
        statuses = []
        for _ in range(6):
            r = await client.post(
                f"{w.url}/v1/traces",
                content=b"",
                headers={**AUTH, "Content-Type": "application/x-protobuf"},
            )
            statuses.append(r.status_code)
        assert statuses[-1] == 429, statuses
        assert int(r.headers["Retry-After"]) >= 1
        status = status_pb2.Status()
        status.ParseFromString(r.content)
        assert status.code == 8 and "rate limit" in status.message
        r = await client.post(f"{w.url}/v1/events", json=[], headers=AUTH)
        assert r.status_code == 429 and r.json()["reason"] == "rate_limited"
        # the read API: per credential; strangers: per address, whatever token they invent
        cal = f"{w.url}/v1/calibration/agent-a"
        got = [
            (await client.get(cal, headers={"Authorization": "Bearer r3ad"})).status_code
            for _ in range(5)
        ]
        assert got[:3] == [404] * 3 and got[-1] == 429, got
        got = [
            (await client.get(cal, headers={"Authorization": f"Bearer guess{i}"})).status_code
            for i in range(14)
        ]
        assert got[0] == 401 and got[-1] == 429, got
        metrics = (await client.get(f"{w.url}/metrics")).text
        assert 'monitor_http_client_errors_total{path="/v1/events",status="415"} 2.0' in metrics
        assert 'monitor_http_client_errors_total{path="/v1/traces",status="429"}' in metrics

    # a body that trickles: cut with 408 at the read deadline (2 s), the connection closed
    await asyncio.sleep(2.5)  # the ingest credential's bucket (1/s) holds a token again

    def trickle() -> tuple[float, bytes]:
        with socket.create_connection(("127.0.0.1", w.port), timeout=30) as s:
            s.sendall(
                b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                b"Content-Length: 1000\r\n\r\n["
            )
            t0, out = time.monotonic(), b""
            try:
                for _ in range(40):
                    time.sleep(0.25)
                    s.sendall(b" ")
            except OSError:
                pass  # closed by the server
            s.settimeout(5)
            try:
                while chunk := s.recv(65536):
                    out += chunk
            except OSError:
                pass
            return time.monotonic() - t0, out

    took, raw = await loop.run_in_executor(None, trickle)
    status, _, body = split_response(raw)
    assert status == 408 and json.loads(body)["reason"] == "timeout", raw[:300]
    assert took < 8.0, took

    # headers that never complete, and an idle keep-alive connection: closed after 2 s
    def idle(first: bytes) -> float:
        with socket.create_connection(("127.0.0.1", w.port), timeout=30) as s:
            s.sendall(first)
            t0 = time.monotonic()
            while s.recv(65536):
                pass
            return time.monotonic() - t0

    took = await loop.run_in_executor(None, idle, b"GET /health HTTP/1.1\r\nHost: x\r\n")
    assert took < 6.0, took
    took = await loop.run_in_executor(None, idle, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert took < 6.0, took


async def test_gzip_ingest_still_accepted(worker: WorkerProcess, database_url: str) -> None:
    events = [event_dict(f"gz-{i}", "gz", at=i) for i in range(3)]
    body = zlib.compress(json.dumps(events).encode(), wbits=31)
    async with httpx.AsyncClient(timeout=30) as client:
        r = await client.post(
            f"{worker.url}/v1/events",
            content=body,
            headers={**AUTH, "Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
        assert r.status_code == 202, r.text
        r = await client.post(
            f"{worker.url}/v1/events",
            content=body[:-20],
            headers={**AUTH, "Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
        assert r.status_code == 400 and r.json()["reason"] == "bad_encoding", r.text
    sql = "SELECT count(*) FROM events WHERE conversation_id = 'gz'"
    assert await wait_for_count(database_url, 3, sql) == 3
    assert await count(database_url, sql) == 3
