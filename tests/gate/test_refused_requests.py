"""Requests the HTTP parser refuses, sent to the real worker and the real gate process over raw
sockets with marker secrets in their headers and bodies: every one is answered with the JSON
error shape and its reason, counted per reason on ``/metrics``, logged at most once per reason,
and no marker appears in any answer or any log file (both processes log at debug)."""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.gate.test_gate_outages import FAST
from tests.gate.test_gate_server import labelled
from tests.servers.worker import GateProcess, WorkerProcess, create_topic

TOKEN = "s3cret"  # the ingest and gate token (the markers are other values)


class Markers:
    """Strings that must never leave the request: one that the log redaction would catch (a
    long ``mk_`` key behind ``Bearer``) and plain words it would not (a header's and a body's),
    so that their absence proves nothing was logged, not only that it was redacted."""

    def __init__(self) -> None:
        tag = secrets.token_hex(6)
        self.key = f"mk_MARKERKEY{tag}{secrets.token_urlsafe(24)}"
        self.word = f"zebrahdr{tag}"
        self.body = f"zebrabody{tag}"

    @property
    def all(self) -> tuple[str, ...]:
        return (self.key, self.word, self.body, self.key[3:27])


def cases(m: Markers, path: bytes) -> list[tuple[str, int, str, bytes | tuple[bytes, ...]]]:
    """(name, status, reason, bytes or parts sent 0.3 s apart) for each refusal path, aimed at
    the endpoint ``path`` (a body endpoint: the gate process's /v1/gate, the worker's
    /v1/events)."""
    auth = f"Authorization: Bearer {m.key}\r\n".encode()
    word, body = m.word.encode(), m.body.encode()
    event = json.dumps({"content": m.body, "note": m.word}).encode()
    post = b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n"
    chunked = post + auth + b"Transfer-Encoding: chunked\r\n\r\n"
    return [
        ("control char in a header", 400, "bad_header", post + auth[:-2] + b"\x01\r\n\r\n"),
        (
            "control char after a plain value",
            400,
            "bad_header",
            post + auth + b"X-Note: " + word + b"\x7f\r\nContent-Length: 2\r\n\r\n{}",
        ),
        ("header without a colon", 400, "bad_header", post + auth + word + b"\r\n\r\n"),
        (
            "HTTP/1.0 body after Connection: close",
            400,
            "data_after_close",
            b"POST "
            + path
            + b" HTTP/1.0\r\nHost: x\r\nConnection: close\r\n"
            + auth
            + b"\r\n"
            + event,
        ),
        (
            "HTTP/1.0 bytes beyond Content-Length after Connection: close",
            400,
            "data_after_close",
            b"POST "
            + path
            + b" HTTP/1.0\r\nConnection: close\r\nContent-Length: 2\r\n"
            + auth
            + b"\r\n{}"
            + event,
        ),
        ("bad chunk size", 400, "bad_chunked", chunked + b"5\r\nhello\r\nZZ" + body + b"\r\n"),
        ("chunk longer than said", 400, "bad_chunked", chunked + b"2\r\n" + event + b"\r\n"),
        (
            "header line too long",
            400,
            "line_too_long",
            post + auth[:-2] + word * (9000 // len(word)) + b"\r\n\r\n",
        ),
        (
            "request line too long",
            400,
            "line_too_long",
            b"GET /v1/" + word * (9000 // len(word)) + b" HTTP/1.1\r\n" + auth + b"\r\n",
        ),
        (
            "too many headers",
            431,
            "too_many_headers",
            post + b"".join(b"X-%d: %s\r\n" % (i, word) for i in range(200)) + auth + b"\r\n",
        ),
        ("not a method", 400, "bad_method", b"ZEBRA " + word + b" HTTP/1.1\r\n" + auth + b"\r\n"),
        (
            "a second request that is not one",
            400,
            "bad_method",
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + event + b"\r\n" + auth + b"\r\n",
        ),
        (
            "bad URL",
            400,
            "bad_url",
            b"POST " + path + b"?" + word + b"\x7f HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n",
        ),
        (
            "bad version",
            400,
            "bad_request_line",
            b"POST " + path + b" HTTP/9." + word + b"\r\n" + auth,
        ),
        ("TLS on plain HTTP", 400, "tls_on_plain_http", b"\x16\x03\x01\x02\x00\x01" + word),
        (
            "bad Content-Length",
            400,
            "bad_content_length",
            post + auth + b"Content-Length: 1" + word + b"\r\n\r\n",
        ),
        (
            "Content-Length and Transfer-Encoding",
            400,
            "bad_transfer_encoding",
            post + auth + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n"
            b"abc\r\n0\r\n\r\n" + body,
        ),
        # a malformed chunk after the body began (the credential is right, so the endpoint
        # reads the body): aiohttp leaves the endpoint's read waiting, so the read deadline
        # answers (408, counted as a client error of the path)
        (
            "bad chunk after the body began",
            408,
            "timeout",
            (
                post
                + f"Authorization: Bearer {TOKEN}\r\n".encode()
                + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"5\r\n"
                + event[:5]
                + b"\r\n",
                b"ZZ" + body + b"\r\n",
            ),
        ),
    ]


def exchange(port: int, data: bytes | tuple[bytes, ...], half_close: bool = False) -> bytes:
    """Send ``data`` (parts 0.3 s apart) on a fresh connection; all it answers until closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        for part in data if isinstance(data, tuple) else (data,):
            s.sendall(part)
            if isinstance(data, tuple):
                time.sleep(0.3)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except OSError:
            pass  # reset after the answer: what came is kept
        return out


def parse(raw: bytes) -> tuple[int, dict[str, str], Any]:
    """The first response in ``raw``: status, headers, its body as JSON."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    body = rest[: int(headers.get("content-length", len(rest)))]
    return int(lines[0].split()[1]), headers, json.loads(body)


def last_answer(raw: bytes) -> bytes:
    """The last response in ``raw`` (a pipelined request's answers come first)."""
    return raw[raw.rfind(b"HTTP/1.") :]


async def refuse_all(
    process: WorkerProcess, path: bytes, m: Markers, answers: list[bytes]
) -> Counter[str]:
    """Send every case to ``process`` (its endpoint ``path``); check each answer; returns the
    refusals by reason."""
    loop = asyncio.get_running_loop()
    refused: Counter[str] = Counter()
    for name, status, reason, data in cases(m, path):
        raw = await loop.run_in_executor(None, exchange, process.port, data)
        answers.append(raw)
        got, headers, body = parse(last_answer(raw))
        assert (got, body.get("reason")) == (status, reason), (name, raw[:300])
        assert headers["content-type"].startswith("application/json"), name
        assert set(body) == {"error", "reason"}, (name, body)
        if reason != "timeout":
            refused[reason] += 1
    # a body cut short (the credential right, so the endpoint reads it): the client leaves
    # before its Content-Length arrived; nobody reads an answer, the refusal is counted
    cut = b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
    cut += b"\r\nX-Note: " + m.word.encode() + b"\r\nContent-Type: application/json\r\n"
    cut += b"Content-Length: 1000\r\n\r\n"
    cut += json.dumps({"content": m.body}).encode()
    answers.append(await loop.run_in_executor(None, exchange, process.port, cut, True))
    refused["connection_lost"] += 1
    # a flood of one reason: all counted, one log line
    flood = b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nX-A: " + m.word.encode() + b"\x01\r\n\r\n"
    for _ in range(40):
        answers.append(await loop.run_in_executor(None, exchange, process.port, flood))
    refused["bad_header"] += 40
    return refused


async def until_counted(process: WorkerProcess, want: Counter[str]) -> dict[str, float]:
    """The refusal counters of ``process``, once they reach ``want`` (at most 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        got = {r: labelled(process, "monitor_http_refused_total", reason=r) for r in want}
        if all(got[r] >= n for r, n in want.items()) or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.2)


def check_logs(paths: list[Path], m: Markers, reasons: Counter[str]) -> None:
    """No marker in any log; one refusal line per reason; no aiohttp per-request line."""
    for path in paths:
        text = path.read_text(errors="replace")
        for marker in m.all:
            assert marker not in text, f"{marker!r} in {path.name}"
        assert "Error handling request" not in text, path.name
        lines = [x for x in text.splitlines() if "refused a request before any endpoint" in x]
        by_reason = Counter(x.split("endpoint: ", 1)[1].split(" ", 1)[0] for x in lines)
        assert by_reason == Counter(dict.fromkeys(reasons, 1)), (path.name, by_reason)


@asynccontextmanager
async def debug_worker_and_gate(
    bootstrap: str, database_url: str, topic: str, tmp: Path
) -> AsyncIterator[tuple[WorkerProcess, GateProcess]]:
    """A worker, then a gate process, both logging at debug (every line a server could write
    lands in their logs), a 2 s body deadline and a gate token; stopped on exit."""
    policy = tmp / "gate.yaml"
    policy.write_text('version: "v1"\nrules:\n  - threshold: 0.5\n')
    env = {
        **FAST,
        "MONITOR_GATE_POLICY_FILE": str(policy),
        "MONITOR_HTTP_READ_TIMEOUT_S": "2",
        "MONITOR_GATE_TOKEN": TOKEN,
        "MONITOR_INGEST_TOKEN": TOKEN,
    }
    await create_topic(bootstrap, topic)
    worker = WorkerProcess(bootstrap, database_url, topic, tmp, **env)
    gate_ = GateProcess(bootstrap, database_url, topic, tmp, **env)
    worker.loglevel = gate_.loglevel = "debug"
    try:
        await worker.start().wait_ready()  # first: it makes the origin key the gate reads
        await gate_.start().wait_ready()
        yield worker, gate_
    finally:
        gate_.stop()
        worker.stop()


async def test_refused_requests_are_answered_counted_and_never_logged(
    broker: Any, topic_name: str, database_url: str, tmp_path: Path
) -> None:
    m = Markers()
    answers: list[bytes] = []
    async with debug_worker_and_gate(broker.bootstrap, database_url, topic_name, tmp_path) as (
        worker,
        gate_,
    ):
        refused: Counter[str] = Counter()
        for process, path in ((worker, b"/v1/events"), (gate_, b"/v1/gate")):
            refused = await refuse_all(process, path, m, answers)
            counted = await until_counted(process, refused)
            assert counted == {r: float(n) for r, n in refused.items()}, (process.url, counted)
        # the servers still answer real requests, and a stranger's 401 quotes nothing either
        async with httpx.AsyncClient(timeout=10) as client:
            for process, path in ((worker, b"/v1/events"), (gate_, b"/v1/gate")):
                r = await client.post(
                    f"{process.url}{path.decode()}",
                    json={"conversation_id": m.body, "content": m.body},
                    headers={"Authorization": f"Bearer {m.key}", "X-Note": m.word},
                )
                assert r.status_code == 401, r.text
                answers.append(r.content)
                assert (await client.get(f"{process.url}/health")).status_code == 200
    everything = b"\n".join(answers)
    for marker in m.all:
        assert marker.encode() not in everything, marker
    logs = sorted(tmp_path.glob("*.log"))
    assert {p.name.split("-")[0] for p in logs} >= {"worker", "gate"}, logs
    check_logs(logs, m, refused)
