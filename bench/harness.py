"""What the benchmarks share: scratch topics and databases, the worker subprocess, CPU meters.

Everything here cleans up after itself: a scratch database is dropped, a scratch topic deleted,
a worker stopped (SIGTERM, then SIGKILL of its process group) even when the caller is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import httpx
import psutil
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from monitor.stack.ports import free_port  # noqa: E402
from monitor.store import engine  # noqa: E402


def given_postgres() -> str | None:
    """The admin URL in ``DATABASE_URL`` (or ``MONITOR_DATABASE_URL``), when set."""
    return os.environ.get("DATABASE_URL") or os.environ.get("MONITOR_DATABASE_URL")


def postgres_server(stack: contextlib.ExitStack, workdir: Path) -> str:
    """The admin URL of the Postgres server a benchmark uses: ``DATABASE_URL``'s (or
    ``MONITOR_DATABASE_URL``'s) when set, else a private embedded one in ``workdir / "pg"``,
    stopped when ``stack`` closes."""
    server_url = given_postgres()
    if server_url:
        return server_url
    from monitor.stack.postgres import EmbeddedPostgres  # only when no server is given

    return stack.enter_context(EmbeddedPostgres(workdir / "pg")).admin_url


def on_postgres(prefix: str, run: Callable[[str], Awaitable[object]]) -> None:
    """Run ``run(admin_url)`` to completion on :func:`postgres_server` (a private one in a
    temporary directory named ``prefix*``, removed afterwards, when no server is given)."""
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        asyncio.run(run(postgres_server(stack, workdir)))


class Postgres(NamedTuple):
    """The server a metered benchmark uses (see :func:`metered_postgres`)."""

    admin_url: str
    postmaster: int | None  # its postmaster's pid for :class:`CpuMeter`; None: not metered
    given: bool  # DATABASE_URL's server (else a private embedded one)


def metered_postgres(stack: contextlib.ExitStack, workdir: Path) -> Postgres:
    """:func:`postgres_server`, with the pid of its postmaster when it runs on this machine."""
    admin_url = postgres_server(stack, workdir)
    if given_postgres():
        return Postgres(admin_url, asyncio.run(local_postmaster(admin_url)), True)
    return Postgres(admin_url, postmaster_pid((workdir / "pg").resolve()), False)


@contextlib.contextmanager
def work_dir(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A new temporary directory for a run's logs and data, removed on exit unless ``keep``
    (then its path is printed)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        if keep:
            print(f"logs kept in {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def broker_and_postgres(workdir: Path) -> Iterator[tuple[str, str]]:
    """A private Tansu broker (log in ``workdir``) and :func:`postgres_server`: the broker's
    bootstrap address and the server's admin URL, both stopped on exit."""
    from monitor.stack.broker import EmbeddedBroker

    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(EmbeddedBroker(log_path=workdir / "tansu.log"))
        yield broker.bootstrap, postgres_server(stack, workdir)


@contextlib.asynccontextmanager
async def scratch_database(admin_url: str, tag: str, *, keep: bool = False) -> AsyncIterator[str]:
    """A freshly created and migrated database on the server (libpq URL), dropped afterwards
    unless ``keep``."""
    url = engine.with_database(admin_url, f"bench_{tag}_{uuid.uuid4().hex[:8]}")
    await engine.ensure_database(url)
    try:
        await asyncio.to_thread(engine.upgrade, url)
        yield engine.libpq_url(url)
    finally:
        if not keep:
            await engine.drop_database(url)


@contextlib.asynccontextmanager
async def scratch_topic(bootstrap: str, tag: str, partitions: int) -> AsyncIterator[str]:
    """A new topic, deleted afterwards with its DLQ (frees Tansu's memory)."""
    name = f"bench-{tag}-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
        yield name
    finally:
        with contextlib.suppress(Exception):
            await admin.delete_topics([name, f"{name}.dlq"])
        await admin.close()


WORKER_ARGV = ("-m", "monitor.cli", "worker", "--loglevel", "info")


class Worker:
    """``python -m monitor.cli worker`` (or ``python *argv``) on ``topic`` as a subprocess;
    its log goes to ``log``."""

    def __init__(
        self,
        bootstrap: str,
        db_url: str,
        topic: str,
        log: Path,
        extra: dict[str, str],
        argv: tuple[str, ...] = WORKER_ARGV,
    ) -> None:
        self.argv = argv
        self.port = free_port()
        self.grpc_port = free_port()
        self.log = log
        self.env = {
            **os.environ,
            "MONITOR_KAFKA_BOOTSTRAP": bootstrap,
            "DATABASE_URL": db_url,
            "MONITOR_KAFKA_IDEMPOTENT": "false",  # Tansu's memory store lacks InitProducerId
            "MONITOR_WEB_PORT": str(self.port),
            "MONITOR_OTLP_GRPC_PORT": str(self.grpc_port),
            "MONITOR_STATE_DIR": str(log.parent / f"state-{topic}"),
            "MONITOR_TOPIC_EVENTS": topic,
            "MONITOR_TOPIC_DLQ": f"{topic}.dlq",
            "MONITOR_CONSUMER_GROUP": f"g-{topic}",
            "MONITOR_APP_ID": f"bench-{topic}",
            "PYTHONPATH": str(REPO),
            **extra,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *self.argv],
                env=self.env,
                cwd=self.log.parent,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches only the bench, which stops us
            )

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def _check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise RuntimeError(f"worker is not running (exit {code}); see {self.log}")

    async def _poll(
        self,
        what: str,
        probe: Callable[[httpx.AsyncClient], Awaitable[bool]],
        every_s: float,
        timeout_s: float,
    ) -> float:
        """Call async ``probe`` every ``every_s`` until true; perf_counter() at that moment."""
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline:
                self._check_alive()
                with contextlib.suppress(httpx.HTTPError):
                    if await probe(client):
                        return time.perf_counter()
                await asyncio.sleep(every_s)
        raise TimeoutError(f"worker: {what} not seen after {timeout_s}s; see {self.log}")

    async def metrics(self, client: httpx.AsyncClient) -> dict[str, float]:
        """The unlabelled samples of ``GET /metrics``."""
        text = (await client.get(f"http://127.0.0.1:{self.port}/metrics")).text
        return {m[1]: float(m[2]) for m in re.finditer(r"^(\w+) (\S+)$", text, re.M)}

    async def wait_ready(self, timeout_s: float = 90.0) -> float:
        """``GET /health`` answers 200 (polled every 20 ms)."""

        async def probe(client: httpx.AsyncClient) -> bool:
            r = await client.get(f"http://127.0.0.1:{self.port}/health")
            return r.status_code == 200

        return await self._poll("/health 200", probe, 0.02, timeout_s)

    async def wait_assigned(self, partitions: int, timeout_s: float = 60.0) -> float:
        """Wait until the ingest loop logged that it owns every partition (log polled every
        10 ms); returns when that happened per the log line's own timestamp, in
        ``time.perf_counter()`` terms (ms resolution), not when it was seen."""
        pattern = re.compile(
            r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\].*assigned partitions: "
            + re.escape(str(list(range(partitions)))),
            re.M,
        )
        stamp: list[str] = []

        async def probe(client: httpx.AsyncClient) -> bool:
            found = pattern.search(self.log.read_text(errors="replace"))
            if found:
                stamp.append(found.group(1))
            return found is not None

        seen = await self._poll("the partition assignment", probe, 0.01, timeout_s)
        logged = datetime.strptime(stamp[-1], "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time
        return min(seen, time.perf_counter() - (time.time() - logged))

    async def batch_stats(self) -> tuple[int, float]:
        """Committed batches and their mean latency in s (decode + write + commit)."""
        async with httpx.AsyncClient(timeout=5.0) as client:
            m = await self.metrics(client)
        count = int(m.get("monitor_batches_total", 0))
        return count, m.get("monitor_batch_latency_seconds_sum", 0.0) / max(count, 1)


@contextlib.contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


# --- CPU accounting -------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, with_children: bool = False) -> float:
    """user + system CPU of ``pid`` (plus its reaped children's), 0.0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + ((cutime + cstime) if with_children else 0)) / _TICK


def parent_of(pid: int) -> int | None:
    """The parent pid of process ``pid`` from ``/proc``, None when it cannot be read."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return None


def children_of(pid: int) -> list[int]:
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and parent_of(int(entry.name)) == pid
    ]


class CpuMeter:
    """CPU seconds of named processes between two ``snapshot()`` calls.

    ``postmaster`` (optional) counts the whole Postgres server: the postmaster, its live
    backends and the backends that already exited (reaped children).
    """

    def __init__(self, pids: dict[str, int], postmaster: int | None = None) -> None:
        self.pids = dict(pids)
        self.postmaster = postmaster

    def snapshot(self, **extra: int) -> dict[str, float]:
        snap = {name: cpu_seconds(pid) for name, pid in {**self.pids, **extra}.items()}
        if self.postmaster is not None:
            pm = self.postmaster
            snap["postgres"] = cpu_seconds(pm, True) + sum(map(cpu_seconds, children_of(pm)))
        return snap

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: after[k] - before.get(k, 0.0) for k in after}


class TreeUsage(NamedTuple):
    """What a process and its live descendants hold and used (see :func:`tree_usage`)."""

    rss_mib: float  # resident set sizes summed (shared pages counted in every process)
    pss_mib: float  # proportional set sizes summed: shared pages split between their users
    processes: int
    cpu_s: float  # user + system CPU, with that of the children they reaped


def tree_usage(pid: int | None) -> TreeUsage:
    """Memory and CPU of process ``pid`` and its live descendants (a Postgres postmaster and
    its backends, a worker and what it forked); zeros when it is gone or ``pid`` is None.
    PSS reads ``smaps_rollup`` (falls back to RSS where it cannot be read)."""
    if pid is None:
        return TreeUsage(0.0, 0.0, 0, 0.0)
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return TreeUsage(0.0, 0.0, 0, 0.0)
    rss = pss = cpu = 0.0
    alive = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            with proc.oneshot():
                resident = proc.memory_info().rss
                times = proc.cpu_times()
            try:
                proportional = float(getattr(proc.memory_full_info(), "pss", resident))
            except psutil.Error:
                proportional = float(resident)
            rss += resident
            pss += proportional
            cpu += times.user + times.system + times.children_user + times.children_system
            alive += 1
    return TreeUsage(rss / 2**20, pss / 2**20, alive, cpu)


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy since boot, every core together (``/proc/stat``:
    all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / _TICK


class OthersMeter:
    """Cores the machine spent on anything but the process trees of ``roots`` (a benchmark
    and what it started) between two :meth:`reading` calls: the machine's busy time (/proc/stat)
    less theirs (:func:`tree_usage`). A benchmark is measured on a quiet machine when this stays
    near 0 (kernel threads and system daemons use a few hundredths of a core)."""

    def __init__(self, roots: Callable[[], Iterable[int | None]]) -> None:
        self.roots = roots
        self._last = self._now()

    def _now(self) -> tuple[float, float, float]:
        ours = sum(tree_usage(pid).cpu_s for pid in set(self.roots()))
        return time.monotonic(), machine_busy_seconds(), ours

    def reading(self) -> float:
        """Average cores used by other processes since the previous reading (or creation)."""
        (t0, busy0, ours0), self._last = self._last, self._now()
        t1, busy1, ours1 = self._last
        # a process of ours that exited drops its CPU from the sum: never count that as others'
        return max(0.0, (busy1 - busy0) - max(0.0, ours1 - ours0)) / max(t1 - t0, 1e-9)


def postmaster_pid(data_dir: Path) -> int | None:
    """The postmaster's pid from ``data_dir/postmaster.pid`` (None if not readable)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((data_dir / "postmaster.pid").read_text().split()[0])
    return None


async def local_postmaster(admin_url: str) -> int | None:
    """The postmaster's pid of the server at ``admin_url`` when it runs on this machine (its
    backend's ``/proc`` entry is readable), else None (a remote server: its CPU is not metered).

    A server of the machine is shared: :class:`CpuMeter` then counts whatever else it runs during
    a phase too (nothing else should, while a benchmark runs)."""
    import asyncpg  # only the benchmarks that meter a server need it

    conn = await asyncpg.connect(engine.libpq_url(admin_url))
    try:  # read while the backend lives: it exits with the connection
        backend = int(await conn.fetchval("SELECT pg_backend_pid()"))
        # its pid names a local process only if that process is a Postgres one (a server on
        # another host, or in another pid namespace, reports pids of its own)
        with contextlib.suppress(OSError):
            if Path(f"/proc/{backend}/comm").read_text().strip() in ("postgres", "postmaster"):
                return parent_of(backend)
        return None
    finally:
        await conn.close()


def markdown_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table: the ``head`` line, its separator, then one line of cells a row."""
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)
