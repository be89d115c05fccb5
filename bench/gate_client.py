"""The open-loop client of ``bench/gate.py``, in a process (and session) of its own.

Why a process of its own: a client sharing the bench's event loop (which also polls Postgres,
meters CPU and starts the load) delays its own sends and reads, and those delays end up in the
measured tail. Run by the bench as ``python bench/gate_client.py`` with its own session; it
reads one JSON command a line on stdin and answers each with one JSON line on stdout:

- ``{"op": "open", "url": ..., "rate": r, "seconds": s, "conversations": n, "token": t}``:
  an open loop, request ``i`` scheduled at ``start + i / r`` whatever the answers (``POST`` of
  ``bench/gate.py``'s bodies, cycling over ``n`` conversations; ``"method": "GET"`` for a
  trivial endpoint without a body). **Latency is measured from each request's scheduled
  time**, not from when it was sent: a client (or server) stall that delays sends is counted
  in full in every request it delayed (no coordinated omission). Connections are kept alive
  and opened before the phase (``warm`` concurrent requests, not measured). The answer holds
  the percentiles (ms), the answers' own ``latency_ms`` (in-handler), how late the client
  sent (``lag_*``: the client's own floor), its CPU over the phase, errors.
- ``{"op": "quit"}``: exits.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.gate import Bodies, pct


def quantiles(values: list[float], prefix: str = "") -> dict[str, float]:
    """p50, p90, p99, p99.9 and max of ``values`` (ms), keys prefixed with ``prefix``."""
    ordered = sorted(values)
    top = ordered[-1] if ordered else float("nan")
    return {
        f"{prefix}p50": pct(ordered, 0.5),
        f"{prefix}p90": pct(ordered, 0.9),
        f"{prefix}p99": pct(ordered, 0.99),
        f"{prefix}p999": pct(ordered, 0.999),
        f"{prefix}max": top,
    }


async def warm(session: aiohttp.ClientSession, send: Any, connections: int) -> None:
    """``connections`` concurrent requests, twice: that many kept-alive connections open."""
    for _ in range(2):
        await asyncio.gather(*(send() for _ in range(connections)))


async def open_loop(session: aiohttp.ClientSession, command: dict[str, Any]) -> dict[str, Any]:
    url, rate, seconds = command["url"], float(command["rate"]), float(command["seconds"])
    method = command.get("method", "POST")
    bodies = Bodies(int(command.get("conversations", 256)))
    headers = {"Authorization": f"Bearer {command.get('token', '')}"}
    if method == "POST":
        headers["Content-Type"] = "application/json"
    latencies: list[float] = []
    lags: list[float] = []
    server: list[float] = []
    errors: dict[str, int] = {}
    degraded = 0

    async def send() -> bytes:
        data = bodies.next() if method == "POST" else None
        async with session.request(method, url, data=data, headers=headers) as r:
            answer = await r.read()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}")
            return answer

    async def one(scheduled: float) -> None:
        nonlocal degraded
        lags.append((time.perf_counter() - scheduled) * 1000)
        try:
            answer = await send()
        except Exception as exc:  # counted, never fatal: the phase's answers still count
            key = f"{type(exc).__name__}: {str(exc)[:60]}"
            errors[key] = errors.get(key, 0) + 1
            return
        latencies.append((time.perf_counter() - scheduled) * 1000)
        if method == "POST":
            body = json.loads(answer)
            server.append(float(body["latency_ms"]))
            degraded += body.get("degraded") is not None

    await warm(session, send, int(command.get("warm", 16)))
    n = int(rate * seconds)
    tasks = []
    cpu0, start = time.process_time(), time.perf_counter()
    for i in range(n):
        scheduled = start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(scheduled)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    return {
        "rate": rate,
        "n": n,
        "answers": len(latencies),
        "achieved": n / elapsed,
        "seconds": elapsed,
        **quantiles(latencies),
        **quantiles(server, "server_"),
        **quantiles(lags, "lag_"),
        "client_cpu_share": cpu / elapsed,
        "client_cpu_us": cpu / max(n, 1) * 1e6,
        "errors": errors,
        "degraded": degraded,
    }


async def main() -> None:
    loop = asyncio.get_running_loop()
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=600)
    async with aiohttp.ClientSession(connector=connector) as session:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            command = json.loads(line)
            if command["op"] == "quit":
                return
            result = await open_loop(session, command)
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
