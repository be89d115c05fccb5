"""``monitor gate serve``: the gate as a process of its own (I/O edge: aiohttp, Postgres, Kafka).

An agent waiting on the gate queues behind nobody's ingest batch: this process runs the gate
and nothing else. It serves ``POST /v1/gate`` (the framework-neutral handlers of
:mod:`monitor.gate.endpoint`), ``GET /health`` and ``GET /metrics``;
holds the policy, the maps and the advisor's cuts in memory (:class:`GateState`), reloaded
from Postgres at start, every ``gate_refresh_s`` and at once when a new map is fitted; checks
credentials against the API keys it reloads every ``keys_refresh_s``; and publishes decision
events through its own :class:`DecisionProducer` and disk buffer (:class:`DecisionOutbox`).

Outages: while Postgres is down it answers from the maps and keys it holds (``maps_stale`` in
every answer and on ``/health``); while the broker is down the decision events are kept on
disk (``decision_events_kept`` in every answer, ``buffered`` on ``/health``) and replayed,
oldest first, once it is back. ``/health`` answers 200 while the process answers requests;
its ``status`` is ``degraded`` (with the reasons) while it answers from stale maps or holds
decision events back.

The socket is bound with ``SO_REUSEPORT``: several gate processes can serve one port (the
kernel spreads connections across them); each opens a disk buffer slot of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic_core import to_json

from monitor.auth import repo as key_repo
from monitor.auth.cache import KeyCache
from monitor.auth.keys import Scope
from monitor.config import Settings
from monitor.core.clock import SystemClock
from monitor.core.errors import MonitorError
from monitor.core.gc_tuning import collect_periodically, tune_gc
from monitor.core.http_guard import Guard
from monitor.core.rate_limit import Rate, RateLimiter
from monitor.gate.answering import GATE, GateAnswerer, gate_limits
from monitor.gate.buffer_slot import open_decision_path
from monitor.gate.decision_outbox import STOP_DRAIN_S, DecisionOutbox
from monitor.gate.http_server import Refusals, RefusingRunner, handler_args, json_errors
from monitor.gate.state import MAP_CHECK_S, GateState
from monitor.store.engine import make_engine
from monitor.telemetry.ops_metrics import CONTENT_TYPE, OpsMetrics

log = logging.getLogger("monitor.gate.server")
FIRST_LOAD_S = 5.0  # the first load of maps and keys waits this long before serving anyway


def gate_guard(settings: Settings, clock: Callable[[], float]) -> Guard:
    """The gate's rate guard: the credential's rate and the per-peer bucket of strangers."""
    keys = settings.http_rate_max_keys
    strangers = RateLimiter(
        Rate(settings.http_unauth_rate_per_s, settings.http_unauth_rate_burst), clock, keys
    )
    rate = Rate(settings.http_gate_rate_per_s, settings.http_gate_rate_burst)
    return Guard(RateLimiter(rate, clock, keys), strangers)


def health_body(state: GateState, outbox: DecisionOutbox) -> dict[str, Any]:
    """``/health`` of a gate process: ``ok``, or ``degraded`` with its ``reasons``."""
    maps, events = state.status(), outbox.status()
    reasons = []
    if state.loaded_at is None:
        reasons.append("maps_not_loaded")
    if "maps_stale" in maps:
        reasons.append("maps_stale")
    if outbox.buffered_mode or events["buffered"]:
        reasons.append("decision_events_buffered")
    body: dict[str, Any] = {"status": "degraded" if reasons else "ok"}
    if reasons:
        body["reasons"] = reasons
    return {**body, "maps": maps, "gate_decision_events": events}


class GateServer:
    """One gate process: the HTTP application, the state it answers from, its producer and
    disk buffer, and the periodic refreshes. :meth:`start` binds and serves; :meth:`close`
    stops serving, writes decision events still in flight to disk and closes connections."""

    def __init__(self, settings: Settings) -> None:
        if not settings.kafka_bootstrap or not settings.database_url:
            raise MonitorError("the gate needs MONITOR_KAFKA_BOOTSTRAP and DATABASE_URL")
        self.settings = settings
        self.clock = SystemClock()
        self.metrics = OpsMetrics()
        self.state = GateState.from_settings(settings)
        self.engine = make_engine(settings.database_url, pool_size=2)
        self.producer, self.buffer, self.outbox = open_decision_path(settings)
        tokens: dict[Scope, str | None] = {"gate": settings.gate_token}
        self.keys = KeyCache(
            self._load_keys,
            tokens,
            self.clock.now,
            time.monotonic,
            miss_interval_s=settings.keys_miss_refresh_s,
        )
        limits = gate_limits(settings)
        self.answerer = GateAnswerer(
            self.state,
            self.outbox,
            limits,
            self.metrics,
            self.clock,
            authorize=lambda authorization: self.keys.check(authorization, "gate"),
            guard=gate_guard(settings, time.monotonic),
        )
        self.tasks: list[asyncio.Task[None]] = []
        self.runner: web.AppRunner | None = None
        self.port: int | None = None

    async def _load_keys(self) -> Any:
        async with self.engine.connect() as conn:
            return await key_repo.load_keys(conn)

    def application(self) -> web.Application:
        app = web.Application(middlewares=[json_errors], handler_args=handler_args(self.settings))
        app.router.add_post(GATE, self.handle_gate)
        app.router.add_get("/health", self.handle_health)
        app.router.add_get("/metrics", self.handle_metrics)
        return app

    async def handle_gate(self, request: web.Request) -> web.Response:
        reply = await self.answerer.answer(request.headers, request.remote, request.content.readany)
        return web.Response(
            body=to_json(reply.body),
            status=reply.status,
            headers=reply.headers,
            content_type="application/json",
        )

    async def handle_health(self, request: web.Request) -> web.Response:
        return web.json_response(health_body(self.state, self.outbox))

    async def handle_metrics(self, request: web.Request) -> web.Response:
        self.metrics.set_gate_outbox(self.outbox.status())
        return web.Response(body=self.metrics.render(), content_type=CONTENT_TYPE.split(";")[0])

    async def refresh_maps(self) -> None:
        await self.state.refresh(self.engine, self.clock.now())

    async def check_new_map(self) -> None:
        await self.state.check_new_map(self.engine, self.clock.now(), time.perf_counter())

    async def start(self) -> int:
        """Load maps and keys (waiting at most :data:`FIRST_LOAD_S`: an unreachable store does
        not keep the gate from serving), bind, serve, start the refreshes and the replay of
        the disk buffer. Returns the bound port."""
        if self.buffer.pending:
            log.warning(
                "gate: %d decision events buffered on disk by an earlier run, replaying them",
                self.buffer.pending,
            )
        first = asyncio.gather(self.refresh_maps(), self.keys.refresh())
        try:
            await asyncio.wait_for(asyncio.shield(first), FIRST_LOAD_S)
        except TimeoutError:
            log.warning("gate: the store did not answer within %ss; serving anyway", FIRST_LOAD_S)
        refusals = Refusals(self.metrics)
        self.runner = RefusingRunner(self.application(), refusals, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(
            self.runner, self.settings.gate_host, self.settings.gate_port, reuse_port=True
        )
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1]) if sockets else self.settings.gate_port
        s = self.settings
        self.tasks = [
            asyncio.ensure_future(every(s.keys_refresh_s, self.keys.refresh)),
            asyncio.ensure_future(every(s.gate_refresh_s, self.refresh_maps)),
            asyncio.ensure_future(every(MAP_CHECK_S, self.check_new_map)),
            asyncio.ensure_future(self.outbox.run()),
        ]
        log.info("gate serving on %s:%s", s.gate_host, self.port)
        return self.port

    async def close(self) -> None:
        """Stop serving (answers under way finish), then write the decision events still in
        flight to disk and deliver the buffer for up to ``STOP_DRAIN_S``, stop the producer and
        close the buffer, the store and the LLM judge."""
        if self.runner is not None:
            await self.runner.cleanup()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.sleep(0)  # the publications of the last answers reach the outbox
        await self.outbox.close(STOP_DRAIN_S)
        await self.producer.close()
        await self.answerer.drop_pending()
        self.buffer.close()
        await self.state.aclose()
        await self.engine.dispose()


async def every(period_s: float, job: Callable[[], Awaitable[Any]]) -> None:
    """Run ``job`` every ``period_s`` seconds until cancelled; a failure is logged, not fatal."""
    while True:
        await asyncio.sleep(period_s)
        try:
            await job()
        except Exception as exc:  # the next period retries
            log.warning("gate: periodic job failed: %s", exc)


def set_priority(nice: int) -> bool:
    """Run this process at the nice value ``nice`` (``gate_nice``; 0 leaves it): a gate below
    0 is run ahead of the processes it shares cores with, so its answers do not wait for
    their time slices (:func:`apply_nice`). False (and a warning) when the kernel refuses the
    process's nice value (no CAP_SYS_NICE)."""
    if nice == 0:
        return True
    return apply_nice(nice)


def apply_nice(nice: int, pid: int = 0) -> bool:
    """Give process ``pid`` (0: this one) the nice value ``nice``, and its session's autogroup
    the same nice value when it leads a session of its own (:func:`set_autogroup_nice`).

    Why both: with ``kernel.sched_autogroup_enabled`` (``CONFIG_SCHED_AUTOGROUP``) the
    scheduler shares the CPU between sessions' autogroups first and weighs a process's own
    nice value only against the processes of its session; the worker, broker and Postgres
    that ``monitor up`` starts each lead a session of their own, so the process's nice value
    alone hardly changes what the gate gets beside them. False (and a warning) when the
    kernel refuses the process's nice value; the autogroup's outcome is logged only."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError as exc:
        log.warning("gate: could not set the nice value %d (%s); left unchanged", nice, exc)
        return False
    log.info("gate: nice value %d", nice)
    set_autogroup_nice(nice, pid or os.getpid())
    return True


def set_autogroup_nice(nice: int, pid: int) -> bool:
    """Write ``nice`` to ``/proc/<pid>/autogroup`` when ``pid`` leads its own session (the
    autogroup is the session's: written from a process that does not lead it, it would
    reprioritize every process of the session it was started from, a shell's for one). False,
    with a log line saying why and what it means, when it is not written: ``pid`` is not a
    session leader, the kernel has no autogroups, or it refuses the value (EPERM: a negative
    value needs CAP_SYS_NICE; EAGAIN: changed less than a second ago without CAP_SYS_ADMIN)."""
    path = Path(f"/proc/{pid}/autogroup")
    try:
        leads = os.getsid(pid) == pid
    except OSError as exc:
        log.warning("gate: autogroup nice not set: process %d not found (%s)", pid, exc)
        return False
    if not leads:
        log.warning(
            "gate: autogroup nice not set: the process does not lead its own session (session "
            "%d), so with kernel.sched_autogroup_enabled its nice value %d weighs only against "
            "the processes of that session; start it in a session of its own (monitor up does, "
            "setsid(1) does) to be weighed against the others",
            os.getsid(pid),
            nice,
        )
        return False
    if not path.exists():
        log.info("gate: no %s (a kernel without autogroups): the nice value alone applies", path)
        return False
    try:
        path.write_text(f"{nice}\n")
    except OSError as exc:
        log.warning(
            "gate: could not set the session's autogroup nice value %d in %s (%s): against "
            "processes of other sessions the gate keeps the autogroup's weight",
            nice,
            path,
            exc,
        )
        return False
    log.info("gate: autogroup nice value %d (%s)", nice, path.read_text().strip())
    return True


async def serve(settings: Settings) -> None:
    """Run one gate process until SIGINT/SIGTERM, at the priority of ``gate_nice``. Once
    serving (imports, state and app built), :func:`tune_gc` freezes what is alive and raises
    the collector's thresholds, as the worker does: fewer, shorter collection pauses in the
    answers' tail; a full collection runs every ``gc_interval_s``, as in the worker."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    set_priority(settings.gate_nice)
    server = GateServer(settings)
    try:
        await server.start()
        tune_gc()
        collector = asyncio.create_task(collect_periodically(settings.gc_interval_s))
        await stop.wait()
        collector.cancel()
    finally:
        await server.close()


def run_gate(settings: Settings) -> None:
    """Run the gate process in the foreground (blocking)."""
    asyncio.run(serve(settings))
