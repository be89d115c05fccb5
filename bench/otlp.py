"""OTLP ingest throughput: ``POST /v1/traces`` and OTLP/gRPC -> worker -> Postgres, against
``POST /v1/events``.

The workload is the examples/otel_agent.py agent (per conversation: ``invoke_agent`` > ``chat``
> ``execute_tool`` spans, which map to 5 or 6 events), made in process by the real OTel SDK. The
spans are cut into export batches of 512 (the ``BatchSpanProcessor`` default) and encoded
beforehand with the official OTLP protobuf encoder (gzip, as exporters are usually set up);
the events phase posts the very events the mapping makes of the whole traces, cut into as many
JSON arrays. So both phases send the same events in the same number of requests, and the
per-event rate is comparable; the traces phase also pays for the traces its batches cut (their
spans wait in Postgres until the root's batch comes).

The gRPC phase sends the same trace bodies (uncompressed protobuf, ``grpc-encoding: gzip``) to
the worker's ``TraceService/Export``, as the official gRPC exporter does.

Each repeat runs the three phases, each on its own topic, freshly migrated database and worker
subprocess (judges and alerting off in all). A phase is timed from its first request until
``SELECT count(*) FROM events`` reaches the event count (polled every 100 ms), with ``--clients``
concurrent posters. Figures are events/s and the worker's CPU time (user + system, from
``/proc``) per span sent (per event for the events phase); the ratios are traces/events of the
same repeat; the summary is the median over repeats. Run from the repository root::

    .venv/bin/python bench/otlp.py                       # 3,000 conversations, 3 repeats
    .venv/bin/python bench/otlp.py --conversations 500 --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib.util
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import asyncpg
import grpc
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench import harness
from bench.harness import REPO, Worker, running, scratch_database, scratch_topic
from monitor.otel.decode import PROTOBUF, decode_request
from monitor.otel.grpc_receiver import TRACE_SERVICE
from monitor.otel.mapping import MappingConfig, map_spans

TOKEN = "bench-token"
PARTITIONS = 4
BATCH = 512


def example_agent() -> ModuleType:
    """examples/otel_agent.py as a module: its ``conversation(tracer, rng, agent, cid)`` makes
    one conversation's spans (``invoke_agent`` > ``chat`` > ``execute_tool``)."""
    spec = importlib.util.spec_from_file_location("otel_agent", REPO / "examples/otel_agent.py")
    assert spec and spec.loader
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    return agent


def make_requests(conversations: int) -> tuple[list[bytes], list[bytes], int, int]:
    """(gzip protobuf trace bodies, JSON event bodies, events, spans) for the example agent's
    spans."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    agent = example_agent()
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    rng = random.Random(3)
    tracer = provider.get_tracer("bench")
    for i in range(conversations):
        agent.conversation(tracer, rng, "bench-agent", f"b-{i}")
    spans = list(memory.get_finished_spans())
    traces = [
        gzip.compress(bytes(encode_spans(spans[i : i + BATCH]).SerializeToString()))
        for i in range(0, len(spans), BATCH)
    ]
    # the events of whole traces (a batch cuts traces: /v1/traces assembles them again), cut
    # into as many requests as the trace bodies
    whole = bytes(encode_spans(spans).SerializeToString())
    mapped = map_spans(decode_request(whole, PROTOBUF), MappingConfig())
    assert mapped.rejected == 0, mapped.errors
    unique = list({e.event_id: e for e in mapped.events}.values())
    size = -(-len(unique) // len(traces))
    events = [
        b"[" + b",".join(e.to_json() for e in unique[i : i + size]) + b"]"
        for i in range(0, len(unique), size)
    ]
    return traces, events, len(unique), len(spans)


async def rows(db_url: str) -> int:
    conn = await asyncpg.connect(db_url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM events"))
    finally:
        await conn.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def phase(
    name: str,
    bodies: list[bytes],
    want: int,
    bootstrap: str,
    admin_url: str,
    workdir: Path,
    clients: int,
) -> tuple[float, float]:
    """(events/s, worker CPU seconds) of one phase (fresh topic, database and worker)."""
    path, headers = (
        ("/v1/traces", {"Content-Type": PROTOBUF, "Content-Encoding": "gzip"})
        if name == "traces"
        else ("/v1/events", {"Content-Type": "application/json"})
    )
    headers["Authorization"] = f"Bearer {TOKEN}"
    async with (
        scratch_topic(bootstrap, name, PARTITIONS) as topic,
        scratch_database(admin_url, name) as db_url,
    ):
        extra = {
            "MONITOR_INGEST_TOKEN": TOKEN,
            "MONITOR_JUDGE_ENABLED": "false",
            "MONITOR_ALERTING_ENABLED": "false",
            "MONITOR_TOPIC_PARTITIONS": str(PARTITIONS),
            "MONITOR_HTTP_INGEST_RATE_PER_S": "0",
        }  # throughput, not the rate limit
        worker = Worker(bootstrap, db_url, topic, workdir / f"worker-{topic}.log", extra)
        with running(worker):
            await worker.wait_ready()
            await worker.wait_assigned(PARTITIONS)
            queue: list[bytes] = list(reversed(bodies))
            url = f"http://127.0.0.1:{worker.port}{path}"

            async def post(client: httpx.AsyncClient) -> None:
                while queue:
                    r = await client.post(url, content=queue.pop(), headers=headers)
                    if r.status_code not in (200, 202):
                        raise RuntimeError(f"{name}: {r.status_code} {r.text[:200]}")

            async def export(channel: grpc.aio.Channel) -> None:
                stub = channel.unary_unary(f"/{TRACE_SERVICE}/Export")
                metadata = (("authorization", f"Bearer {TOKEN}"),)
                while queue:
                    body = gzip.decompress(queue.pop())  # the exporter's message; gRPC gzips
                    await stub(body, metadata=metadata, compression=grpc.Compression.Gzip)

            cpu = cpu_seconds(worker.pid)
            started = time.perf_counter()
            if name == "grpc":
                target = f"127.0.0.1:{worker.grpc_port}"
                async with grpc.aio.insecure_channel(target) as channel:
                    await asyncio.gather(*(export(channel) for _ in range(clients)))
            else:
                async with httpx.AsyncClient(timeout=60) as client:
                    await asyncio.gather(*(post(client) for _ in range(clients)))
            deadline = time.monotonic() + 300
            while (n := await rows(db_url)) < want:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name}: {n} of {want} events stored after 300 s")
                await asyncio.sleep(0.1)
            elapsed = time.perf_counter() - started
            cpu = cpu_seconds(worker.pid) - cpu
            assert n == want, (name, n, want)
    return want / elapsed, cpu


async def bench(
    args: argparse.Namespace, bootstrap: str, admin_url: str, workdir: Path
) -> list[dict[str, float]]:
    traces, events, n, spans = make_requests(args.conversations)
    print(
        f"{args.conversations} conversations: {spans} spans, {n} events in {len(traces)} "
        "requests per phase"
    )
    runs = []
    for i in range(args.repeat):
        ev, ev_cpu = await phase("events", events, n, bootstrap, admin_url, workdir, args.clients)
        tr, tr_cpu = await phase("traces", traces, n, bootstrap, admin_url, workdir, args.clients)
        gr, gr_cpu = await phase("grpc", traces, n, bootstrap, admin_url, workdir, args.clients)
        runs.append(
            {
                "events": ev,
                "traces": tr,
                "grpc": gr,
                "ratio": tr / ev,
                "grpc_ratio": gr / ev,
                "cpu_us_per_event": ev_cpu / n * 1e6,
                "traces_cpu_us_per_span": tr_cpu / spans * 1e6,
                "grpc_cpu_us_per_span": gr_cpu / spans * 1e6,
            }
        )
        print(
            f"run {i + 1}: /v1/events {ev:,.0f} ev/s ({ev_cpu / n * 1e6:.0f} us CPU/event), "
            f"/v1/traces {tr:,.0f} ev/s ({tr_cpu / spans * 1e6:.0f} us CPU/span, "
            f"ratio {tr / ev:.2f}), gRPC {gr:,.0f} ev/s ({gr_cpu / spans * 1e6:.0f} us CPU/span, "
            f"ratio {gr / ev:.2f})",
            flush=True,
        )
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4, help="Concurrent HTTP posters.")
    args = parser.parse_args()
    with (
        harness.work_dir("bench-otlp-") as workdir,
        harness.broker_and_postgres(workdir) as (bootstrap, pg),
    ):
        runs = asyncio.run(bench(args, bootstrap, pg, workdir))
    med: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(json.dumps({"python": platform.python_version(), "cores": os.cpu_count(), **med}))
    print(
        f"median /v1/traces / /v1/events = {med['ratio']:.2f}, gRPC / /v1/events = "
        f"{med['grpc_ratio']:.2f} (goal >= 0.8 each)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
