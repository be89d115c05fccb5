"""Soak: the embedded stack of ``monitor up`` under a steady, mixed load for ``--minutes``,
sampled every ``--sample-s``; fails on memory that keeps growing, lag that keeps growing or
any error logged.

**The stack** is :class:`monitor.stack.runner.Stack`, as ``monitor up`` starts it (Tansu with
memory storage, embedded Postgres, ``monitor worker`` and ``monitor gate serve`` as
subprocesses), on free ports in a temporary state dir, with live alerting on (``monitor up``
turns it off) and its periodic jobs compressed in time: drift checks every ``--drift-s``,
retention every ``--retention-s`` with every horizon at its shortest (1 day; unsampled events
1 hour), the judges' precision re-measured every minute.

**The load** (about 110 events/s with the defaults; two cores carry it):

- ``--rate`` events/s sent to Kafka with the SDK (``EventEmitter``): simulated agents
  (``soak-kafka-*``) in real time, each event sent when its timestamp comes, so conversations
  go idle and are judged, and their outcomes arrive 30-600 s after the last message (late
  labels: judged conversations judged again). The drifting agent changes half-way through.
- ``--http-rate`` events/s posted to ``POST /v1/events`` (one JSON array a second): a backfill
  of simulated agents (``soak-http-*``) starting two days back whose clock runs fast enough to
  reach six hours ago at the end, so day boundaries and retention horizons pass during the run.
- ``--otlp-rate`` conversations/s of examples/otel_agent.py's spans (``invoke_agent`` >
  ``chat`` > ``execute_tool``) made by the OTel SDK and posted to ``POST /v1/traces`` (gzip
  protobuf, one request a second).
- ``--gate-rate`` calls/s to the gate process's ``POST /v1/gate`` (open loop, bench/gate.py's
  request: a conversation's next message with five events of history), a new conversation each.
- Alert notifications go to a webhook receiver in this process.

**Every sample** (a row of ``samples.csv`` / ``samples.json``): the RSS of the worker, the gate,
the broker and Postgres (each process with its live descendants: Postgres forks a backend per
connection), Postgres's PSS (shared buffers split between the backends instead of counted in
each), the records the broker holds, the worker's consumer lag (``monitor_consumer_lag``, all
partitions) and longest event-loop stall of the last minute
(``monitor_event_loop_stall_seconds``) with the count of wake-ups over 100 ms late, the error
lines logged so far (worker, gate, broker, Postgres), what was sent and stored, the size of
the main tables (``pg_total_relation_size`` over their partitions), the 1-minute load average
and the cores other processes used (:class:`bench.harness.OthersMeter`). ``soak.png`` plots them.

**Validity first** (exit 2, figures marked INVALID): after the load stops and the worker
drained, every event the broker acknowledged and every event ``/v1/events`` accepted is stored
(``event_minutes`` per agent prefix), the spans posted were accepted and made the events their
mapping makes, every gate call was answered and its decision event stored, each source ran at
no less than bench/gate.py's ``VALID_SHARE`` (80 %) of its rate, judges judged, retention ran
on schedule; and the machine was quiet: other processes used at most ``--quiet-cores`` on
average (``--allow-busy`` reports a busy machine and goes on). "Sent" is what the receiver
acknowledged: a Kafka event counts once a ``flush()`` after its ``send()`` returned (the broker
acknowledged it), an HTTP event once ``/v1/events`` answered it ``accepted``, a gate call once
answered with the id of its decision event (``decision_id``; an answer in the rule's fail mode
has no decision event and fails the proof on its own).

**When a source's events are not all stored**, the soak traces them before the stack stops:
which ids (events, gate decisions) are not in ``event_ids``, and for each whether it is in
``dead_letters`` (reason, detail), in the broker's events topic (partition and offset, against
the worker's committed offset there) or nowhere; ``missing.json`` holds it, with the gate's
``/health`` (its decision outbox) and both processes' ``/metrics``. The state directory
(Postgres's data, the gate's disk buffer, the logs) is then kept and its path printed.

**Checks** (exit 1): least-squares slopes (scipy ``linregress``) in MiB/hour over the second
half of the run (the first half is warm-up) of the worker's and the gate's RSS and Postgres's
PSS at most ``--rss-slope-mib-h`` (10 MiB/hour: 240 MiB a day); the broker's RSS slope at most
that plus ``--broker-kib-per-record`` (2 KiB) per record it came to hold per hour (Tansu's memory
store keeps every record, with no retention: 0.5-1.4 KiB per simulated event measured, the more
the smaller its batches); the consumer lag's slope over the whole run at most
``--lag-slope-per-h`` records/hour; no error line logged; no retention run with a failed step.

Run from the repository root (the lead's measurement: 60 minutes on a quiet machine)::

    .venv/bin/python bench/soak.py --minutes 60
    .venv/bin/python bench/soak.py --minutes 0.5 --sample-s 5 --allow-busy   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import dataclasses
import gzip
import itertools
import json
import math
import os
import platform
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench import harness
from bench.gate import VALID_SHARE
from bench.gate import body as gate_body
from bench.otlp import example_agent
from monitor.config import Settings
from monitor.contract.events import AgentEvent
from monitor.ingest.rows import event_key
from monitor.sdk.batches import key_hash
from monitor.sim.traffic import AgentSpec, Simulator, default_agents
from monitor.stack.ports import free_port
from monitor.stack.runner import Running, Stack

TOKEN = "soak-ingest-token"
KAFKA_AGENTS, HTTP_AGENTS, OTLP_AGENT = "soak-kafka-", "soak-http-", "soak-otlp-bot"
#: the real-time stream starts this far back (longer than a simulated conversation, 641 s at
#: most, outcome included), and only its events from the start of the load on are sent: the
#: load is at its steady rate from its first second
LEAD = timedelta(seconds=660)
#: the backfill's simulated clock runs from this far back to BACKFILL_END back over the run
BACKFILL, BACKFILL_END = timedelta(days=2), timedelta(hours=6)
#: a run this long has judged conversations: one goes idle 30 s after its last event by event
#: time and by arrival (judge_idle_s, judge_arrival_idle_s), the scheduler looks every 5 s
JUDGED_AFTER_S = 120.0
PROCESSES = ("worker", "gate", "broker", "postgres")
#: the main tables whose size is sampled (summed over their partitions and indexes)
TABLES = (
    "events",
    "event_ids",
    "conversations",
    "items",
    "verdicts",
    "judge_requests",
    "event_minutes",
    "conversation_minutes",
    "calibration_bins",
    "escalation_bins",
    "otel_traces",
    "otel_pending_spans",
    "dead_letters",
    "drift_checks",
    "notification_outbox",
    "alert_history",
)
COLUMNS = (
    "t_s",
    "utc",
    *(f"{p}_rss_mib" for p in PROCESSES),
    "postgres_pss_mib",
    "postgres_processes",
    "broker_records",
    "consumer_lag",
    "worker_loop_stall_s",
    "worker_loop_lags_over_100ms",
    "error_lines",
    "kafka_sent",
    "http_accepted",
    "otlp_spans",
    "gate_answered",
    "events_stored",
    "judged",
    "retention_runs",
    *(f"size_{t}_mib" for t in TABLES),
    "database_mib",
    "load_1m",
    "other_cores",
)

# --- the worker's and the gate's environment ----------------------------------------------


def soak_env(args: argparse.Namespace, hook_url: str) -> dict[str, str]:
    """The settings the stack's worker and gate run with (over ``monitor up``'s)."""
    shortest = {
        name: "1"
        for name in (
            "EVENTS_DAYS",
            "EVENT_IDS_DAYS",
            "MINUTE_SUMS_DAYS",
            "HOURLY_SUMS_DAYS",
            "DAILY_SUMS_DAYS",
            "ITEMS_DAYS",
            "CONVERSATIONS_DAYS",
            "DEAD_LETTERS_DAYS",
            "VERDICTS_DAYS",
            "UNSAMPLED_HOURS",
        )
    }
    return {
        "MONITOR_ENV_FILE": "",  # a developer's .env must not reach the soak's processes
        "MONITOR_ALERTING_ENABLED": "true",
        "MONITOR_WEBHOOK_URL": hook_url,
        "MONITOR_DRIFT_INTERVAL_S": str(args.drift_s),
        "MONITOR_RETENTION_INTERVAL_S": str(args.retention_s),
        "MONITOR_JUDGE_QUALITY_INTERVAL_S": "60",
        **{f"MONITOR_RETENTION_{name}": value for name, value in shortest.items()},
    }


# --- the load -----------------------------------------------------------------------------


@dataclasses.dataclass
class Counts:
    """What the load sent and what answered, updated as it runs."""

    kafka_sent: int = 0  # acknowledged by the broker (flushed)
    kafka_ids: list[str] = dataclasses.field(default_factory=list)  # sent in order: the first
    # kafka_sent acknowledged
    http_posted: int = 0  # events in the requests
    http_accepted: int = 0  # events /v1/events accepted
    http_ids: list[str] = dataclasses.field(default_factory=list)  # their ids
    http_failed_requests: int = 0
    otlp_requests: int = 0
    otlp_conversations: int = 0
    otlp_spans: int = 0
    otlp_rejected_spans: int = 0
    otlp_failed_requests: int = 0
    otlp_expected_events: int = 0  # what the spans' mapping makes
    otlp_ids: dict[str, str] = dataclasses.field(default_factory=dict)  # their ids: conversation
    gate_calls: int = 0
    gate_answered: int = 0
    gate_decisions: int = 0  # answers naming their decision event (decision_id)
    gate_ids: dict[str, str] = dataclasses.field(default_factory=dict)  # decision id: conversation
    gate_no_event: int = 0  # answered in the rule's fail mode: no decision event
    gate_failed: int = 0
    gate_ms: list[float] = dataclasses.field(default_factory=list)
    notifications: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)  # the first load failures

    def failed(self, what: str) -> None:
        if len(self.errors) < 10:
            self.errors.append(what)


def soak_agents(prefix: str, change_point: datetime | None) -> tuple[AgentSpec, ...]:
    """The simulator's four agents, renamed ``<prefix><behaviour>`` so each source's events
    can be counted apart (``event_minutes.agent_id``)."""
    return tuple(
        dataclasses.replace(a, agent_id=prefix + a.agent_id.removeprefix("sim-"))
        for a in default_agents(change_point)
    )


def events_per_conversation(agents: Sequence[AgentSpec], seed: int) -> float:
    """The simulator's mean events per conversation for ``agents`` (400 conversations)."""
    sim = Simulator(seed=seed, start=datetime(2026, 1, 1, tzinfo=UTC), agents=agents)
    return statistics.mean(len(c) for c in sim.conversations(400))


class Load:
    """The four sources of the load (see the module docstring), until ``stop`` is set."""

    def __init__(self, args: argparse.Namespace, running: Running) -> None:
        self.args, self.running = args, running
        self.started = datetime.now(UTC)  # the streams' simulated clocks are set from it
        self.go, self.stop = asyncio.Event(), asyncio.Event()
        self.ready: list[asyncio.Event] = []
        self.n = Counts()
        self.headers = {"Authorization": f"Bearer {TOKEN}"}

    async def set_off(self, ready: asyncio.Event) -> float:
        """Called by a source once set up (imports, simulators, connections): waits for every
        source to be, so that they all start at once; returns that moment (monotonic)."""
        ready.set()
        await self.go.wait()
        return time.monotonic()

    async def start(self, timeout_s: float = 300.0) -> tuple[list[asyncio.Task[None]], float]:
        """Set up every source, then start them together; their tasks and the start time."""
        sources = {"kafka": self.kafka, "http": self.http, "otlp": self.otlp, "gate": self.gate}
        tasks = []
        for name, source in sources.items():
            self.ready.append(asyncio.Event())
            tasks.append(asyncio.create_task(source(self.ready[-1]), name=name))
        waits = [asyncio.ensure_future(r.wait()) for r in self.ready]
        done, _ = await asyncio.wait(
            [*tasks, asyncio.gather(*waits)],
            timeout=timeout_s,
            return_when=asyncio.FIRST_COMPLETED,
        )
        for task in tasks:
            if task in done:  # a source ended before the start: it failed to set up
                task.result()
                raise RuntimeError(f"the {task.get_name()} load ended before it started")
        if not all(r.is_set() for r in self.ready):
            raise TimeoutError(f"the load was not set up after {timeout_s:.0f} s")
        self.go.set()
        return tasks, time.monotonic()

    async def stopped_within(self, seconds: float) -> bool:
        """Wait ``seconds`` or until ``stop`` is set; True if it was."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), seconds)
        return self.stop.is_set()

    async def kafka(self, ready: asyncio.Event) -> None:
        """The real-time stream to Kafka: each event sent when its timestamp comes."""
        from monitor.sdk import EventEmitter

        args = self.args
        change = self.started + timedelta(minutes=args.minutes / 2)
        agents = soak_agents(KAFKA_AGENTS, change)
        interval = events_per_conversation(agents, args.seed) / args.rate
        sim = Simulator(
            args.seed,
            self.started - LEAD,
            agents,
            interval=timedelta(seconds=interval),
        )
        events = await asyncio.to_thread(skip_before, sim.events(), self.started)
        sent = 0
        async with EventEmitter(
            self.running.kafka_bootstrap, self.running.settings.topic_events, idempotent=False
        ) as emitter:
            flushed = await self.set_off(ready)
            # the events due while the other sources set up are dropped: a steady rate
            events = skip_before(events, datetime.now(UTC))
            for event in events:
                due = (event.ts - datetime.now(UTC)).total_seconds()
                if await self.stopped_within(due):
                    break
                await emitter.send(event)
                self.n.kafka_ids.append(event.event_id)
                sent += 1
                if time.monotonic() - flushed >= 1.0:
                    await emitter.flush()
                    self.n.kafka_sent, flushed = sent, time.monotonic()
            await emitter.flush()
            self.n.kafka_sent = sent

    async def http(self, ready: asyncio.Event) -> None:
        """The backfill posted to ``/v1/events``: ``--http-rate`` events a second."""
        args = self.args
        if args.http_rate <= 0:
            await self.set_off(ready)
            return
        events = backfill(args.seed + 1, args.http_rate * args.minutes * 60)
        url = f"{self.running.web_url}/v1/events"
        async with httpx.AsyncClient(timeout=30.0, headers=self.headers) as client:
            t0 = await self.set_off(ready)
            for second in itertools.count(1):
                if await self.stopped_within(t0 + second - time.monotonic()):
                    return
                due = int(args.http_rate * second) - self.n.http_posted
                batch = list(itertools.islice(events, max(0, due)))
                if not batch:
                    continue
                body = b"[" + b",".join(e.to_json() for e in batch) + b"]"
                self.n.http_posted += len(batch)
                try:
                    r = await client.post(
                        url, content=body, headers={"Content-Type": "application/json"}
                    )
                    answer = r.json() if r.status_code < 500 else {}
                    accepted = int(answer.get("accepted", 0))
                    self.n.http_ids.extend(
                        x["event_id"]
                        for x in answer.get("results", ())
                        if x.get("status") == "accepted"
                    )
                except (httpx.HTTPError, ValueError) as exc:
                    r, accepted = None, 0
                    self.n.failed(f"/v1/events: {exc!r}")
                self.n.http_accepted += accepted
                if r is None or r.status_code != 202:
                    self.n.http_failed_requests += 1
                    if r is not None:
                        self.n.failed(f"/v1/events answered {r.status_code}: {rejections(r)}")

    async def otlp(self, ready: asyncio.Event) -> None:
        """examples/otel_agent.py's spans posted to ``/v1/traces``, one request a second."""
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse,
        )
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from monitor.otel.decode import PROTOBUF, decode_request
        from monitor.otel.mapping import MappingConfig, map_spans

        args = self.args
        if args.otlp_rate <= 0:
            await self.set_off(ready)
            return
        agent = example_agent()
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": OTLP_AGENT}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        tracer = provider.get_tracer("soak")
        rng = random.Random(args.seed)
        made = 0
        headers = {"Content-Type": PROTOBUF, "Content-Encoding": "gzip"}
        url = f"{self.running.web_url}/v1/traces"
        async with httpx.AsyncClient(timeout=30.0, headers=self.headers) as client:
            t0 = await self.set_off(ready)
            for second in itertools.count(1):
                if await self.stopped_within(t0 + second - time.monotonic()):
                    return
                due = int(args.otlp_rate * second) - made
                for _ in range(due):
                    agent.conversation(tracer, rng, OTLP_AGENT, f"soak-otlp-{made:07d}")
                    made += 1
                self.n.otlp_conversations = made
                spans = memory.get_finished_spans()
                memory.clear()
                if not spans:
                    continue
                raw = bytes(encode_spans(spans).SerializeToString())
                mapped = map_spans(decode_request(raw, PROTOBUF), MappingConfig())
                self.n.otlp_requests += 1
                self.n.otlp_spans += len(spans)
                try:
                    r = await client.post(url, content=gzip.compress(raw), headers=headers)
                except httpx.HTTPError as exc:
                    self.n.otlp_failed_requests += 1
                    self.n.failed(f"/v1/traces: {exc!r}")
                    continue
                if r.status_code != 200:
                    self.n.otlp_failed_requests += 1
                    self.n.failed(f"/v1/traces answered {r.status_code}: {r.content[:200]!r}")
                    continue
                answer = ExportTraceServiceResponse()
                answer.ParseFromString(r.content)
                self.n.otlp_rejected_spans += answer.partial_success.rejected_spans
                self.n.otlp_expected_events += len({e.event_id for e in mapped.events})
                self.n.otlp_ids.update((e.event_id, e.conversation_id) for e in mapped.events)

    async def gate(self, ready: asyncio.Event) -> None:
        """Open-loop calls to the gate process, call ``i`` at ``start + i / --gate-rate``."""
        args = self.args
        if args.gate_rate <= 0:
            await self.set_off(ready)
            return
        url = f"{self.running.gate_url}/v1/gate"
        limit = asyncio.Semaphore(32)  # a stalled gate must not pile up unbounded calls
        pending: set[asyncio.Task[None]] = set()

        async def call(client: httpx.AsyncClient, i: int) -> None:
            async with limit:
                t = time.perf_counter()
                cid = f"soak-gate-{i:07d}"
                try:
                    r = await client.post(url, content=gate_body(cid))
                    answer = r.json() if r.status_code == 200 else {}
                    ok = "decision" in answer
                except (httpx.HTTPError, ValueError) as exc:
                    self.n.gate_failed += 1
                    self.n.failed(f"/v1/gate: {exc!r}")
                    return
                if ok:
                    self.n.gate_answered += 1
                    self.n.gate_ms.append((time.perf_counter() - t) * 1000)
                    if decision_id := answer.get("decision_id"):
                        self.n.gate_decisions += 1
                        self.n.gate_ids[decision_id] = cid
                    else:  # the rule's fail mode: the gate could not decide, no event made
                        self.n.gate_no_event += 1
                        self.n.failed(f"/v1/gate answered with no decision event: {answer}")
                else:
                    self.n.gate_failed += 1
                    self.n.failed(f"/v1/gate answered {r.status_code}: {r.text[:200]}")

        headers = {"Content-Type": "application/json"}
        async with httpx.AsyncClient(timeout=10.0, headers=headers) as client:
            t0 = await self.set_off(ready)
            for i in itertools.count():
                if await self.stopped_within(t0 + i / args.gate_rate - time.monotonic()):
                    break
                self.n.gate_calls += 1
                task = asyncio.create_task(call(client, i))
                pending.add(task)
                task.add_done_callback(pending.discard)
            await asyncio.gather(*pending)


def backfill(seed: int, events: float) -> Iterator[AgentEvent]:
    """The backfill stream: simulated agents (``soak-http-*``) from :data:`BACKFILL` back, its
    clock running so that ``events`` events reach :data:`BACKFILL_END` back; should the
    simulator's chance go past that, it starts again from :data:`BACKFILL` back (a new seed)
    rather than send an event of the last hour or ahead of real time (refused)."""
    agents = soak_agents(HTTP_AGENTS, None)
    per_event = (BACKFILL - BACKFILL_END).total_seconds() / max(events, 1.0)
    for run in itertools.count():
        start = datetime.now(UTC) - BACKFILL
        interval = events_per_conversation(agents, seed + run) * per_event
        sim = Simulator(seed + run, start, agents, interval=timedelta(seconds=interval))
        for event in sim.events():
            if event.ts > datetime.now(UTC) - timedelta(hours=1):
                break
            yield event


def rejections(r: httpx.Response) -> str:
    """The reasons of the events a ``/v1/events`` answer rejected, counted (else its text)."""
    try:
        results = r.json()["results"]
    except (ValueError, KeyError, TypeError):
        return r.text[:200]
    reasons: dict[str, int] = {}
    for x in results:
        if x.get("status") == "rejected":
            key = f"{x.get('reason')} ({x.get('field')})"
            reasons[key] = reasons.get(key, 0) + 1
    return ", ".join(f"{n} {why}" for why, n in reasons.items())


def skip_before(events: Iterator[AgentEvent], start: datetime) -> Iterator[AgentEvent]:
    """``events`` (in ts order) from the first one at or after ``start`` on (the ones before
    are made and dropped here, in a thread, before the load starts)."""
    for event in events:
        if event.ts >= start:
            return itertools.chain([event], events)
    return iter(())


@contextlib.asynccontextmanager
async def webhook(port: int, counts: Counts) -> Any:
    """A webhook receiver on 127.0.0.1:``port`` counting the notifications it is posted."""

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        counts.notifications += 1
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield
    finally:
        await runner.cleanup()


# --- the samples --------------------------------------------------------------------------

#: an error-level line of the worker's and the gate's logs: faust's ``[time] [pid] [ERROR]``
#: and the logging module's ``time ERROR name message`` (monitor/cli/worker.py)
PYTHON_ERROR = re.compile(
    r"^(?:\[[^\]]*\] \[\d+\] \[(?:ERROR|CRITICAL)\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?:ERROR|CRITICAL) )"
)
TANSU_ERROR = re.compile(r"\b(?:ERROR|PANIC)\b|panicked at")  # tracing's level, Rust panics
POSTGRES_ERROR = re.compile(r"\b(?:ERROR|FATAL|PANIC):  ")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ErrorLines:
    """Error-level lines appended to the stack's logs since it was created."""

    def __init__(self, logs: dict[str, tuple[Path, re.Pattern[str]]]) -> None:
        self.logs = logs
        self.offsets = {name: 0 for name in logs}
        self.count = 0
        self.examples: list[str] = []  # the first ones, "<log>: <line>"

    def scan(self) -> int:
        """Read what was appended (whole lines) and return the count so far."""
        for name, (path, pattern) in self.logs.items():
            try:
                with path.open("rb") as fh:
                    fh.seek(self.offsets[name])
                    chunk = fh.read()
            except OSError:  # not written yet
                continue
            whole = chunk[: chunk.rfind(b"\n") + 1]
            self.offsets[name] += len(whole)
            for line in whole.decode(errors="replace").splitlines():
                if pattern.search(ANSI.sub("", line)):
                    self.count += 1
                    if len(self.examples) < 20:
                        self.examples.append(f"{name}: {line[:300]}")
        return self.count


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text: ``name{labels}`` (as written) -> value; label sums under the bare name
    prefixed ``sum:`` (``sum:monitor_consumer_lag``)."""
    out: dict[str, float] = {}
    for m in re.finditer(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$", text, re.M):
        value = float(m.group(3))
        out[m.group(1) + (m.group(2) or "")] = value
        if m.group(2):
            out[f"sum:{m.group(1)}"] = out.get(f"sum:{m.group(1)}", 0.0) + value
    return out


STORED = """
SELECT
  coalesce(sum(events) FILTER (WHERE agent_id LIKE 'soak-kafka-%'), 0),
  coalesce(sum(events) FILTER (WHERE agent_id LIKE 'soak-http-%'), 0),
  coalesce(sum(events) FILTER (WHERE agent_id = $1 AND type <> 'gate'), 0),
  coalesce(sum(events) FILTER (WHERE type = 'gate'), 0),
  coalesce(sum(events), 0)
FROM event_minutes
"""
# a partitioned table's size is its partitions' (pg_partition_tree lists no plain table)
SIZES = """
SELECT t, coalesce((SELECT sum(pg_total_relation_size(relid))
                    FROM pg_partition_tree(to_regclass(t))),
                   pg_total_relation_size(to_regclass(t)), 0)::float8
FROM unnest($1::text[]) AS t
"""


class Sampler:
    """One row of :data:`COLUMNS` per :meth:`sample` (see the module docstring)."""

    def __init__(
        self,
        stack: Stack,
        running: Running,
        load: Load,
        db: asyncpg.Connection,
        errors: ErrorLines,
        broker_records: Any,
    ) -> None:
        self.running, self.load, self.db, self.errors = running, load, db, errors
        self.broker_records = broker_records
        assert stack.worker and stack.gate and stack.pg
        broker = getattr(getattr(stack.broker, "_proc", None), "pid", None)
        postmaster = harness.postmaster_pid(stack.pg.data_dir)
        self.pids: dict[str, int | None] = {
            "worker": stack.worker.pid,
            "gate": stack.gate.pid,
            "broker": broker,
            "postgres": postmaster,
        }
        # this process's tree holds the worker, the gate and the broker; Postgres is a daemon
        self.others = harness.OthersMeter(lambda: (os.getpid(), postmaster))
        self.http = httpx.AsyncClient(timeout=10.0)
        self.metrics: dict[str, float] = {}

    async def worker_metrics(self) -> dict[str, float]:
        r = await self.http.get(f"{self.running.web_url}/metrics")
        r.raise_for_status()
        self.metrics = parse_metrics(r.text)
        return self.metrics

    async def stored(self) -> tuple[int, int, int, int, int]:
        row = await self.db.fetchrow(STORED, OTLP_AGENT)
        assert row is not None
        return tuple(int(v) for v in row)  # type: ignore[return-value]

    async def sample(self, t0: float) -> dict[str, Any]:
        """The row of the moment it is called (``t_s``: seconds since ``t0``, monotonic)."""
        t_s = round(time.monotonic() - t0, 1)
        usage = await asyncio.to_thread(
            lambda: {name: harness.tree_usage(pid) for name, pid in self.pids.items()}
        )
        m = await self.worker_metrics()
        sizes = {t: float(s) / 2**20 for t, s in await self.db.fetch(SIZES, list(TABLES))}
        database = await self.db.fetchval("SELECT pg_database_size(current_database())")
        n = self.load.n
        lags = m.get("monitor_event_loop_lag_seconds_count", 0.0) - m.get(
            'monitor_event_loop_lag_seconds_bucket{le="0.1"}', 0.0
        )
        row: dict[str, Any] = {
            "t_s": t_s,
            "utc": datetime.now(UTC).isoformat(timespec="seconds"),
            **{f"{p}_rss_mib": round(usage[p].rss_mib, 1) for p in PROCESSES},
            "postgres_pss_mib": round(usage["postgres"].pss_mib, 1),
            "postgres_processes": usage["postgres"].processes,
            "broker_records": await self.broker_records(),
            "consumer_lag": m.get("sum:monitor_consumer_lag", 0.0),
            "worker_loop_stall_s": m.get("monitor_event_loop_stall_seconds", 0.0),
            "worker_loop_lags_over_100ms": lags,
            "error_lines": await asyncio.to_thread(self.errors.scan),
            "kafka_sent": n.kafka_sent,
            "http_accepted": n.http_accepted,
            "otlp_spans": n.otlp_spans,
            "gate_answered": n.gate_answered,
            "events_stored": (await self.stored())[4],
            "judged": m.get("monitor_judged_conversations_total", 0.0),
            "retention_runs": m.get("sum:monitor_retention_runs_total", 0.0),
            **{f"size_{t}_mib": round(sizes.get(t, 0.0), 2) for t in TABLES},
            "database_mib": round(float(database) / 2**20, 1),
            "load_1m": os.getloadavg()[0],
            "other_cores": round(self.others.reading(), 3),
        }
        return row

    async def aclose(self) -> None:
        await self.http.aclose()


async def records_counter(bootstrap: str) -> tuple[Any, Any]:
    """(an async callable: the records every topic of the broker holds, the end offsets summed
    (Tansu's memory store deletes nothing); its close)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await admin.start()
    await consumer.start()

    async def count() -> int:
        tps = [
            TopicPartition(t["topic"], p["partition"])
            for t in await admin.describe_topics()  # every topic, the ones made since too
            if not t["topic"].startswith("__")
            for p in t["partitions"]
        ]
        ends = await consumer.end_offsets(tps) if tps else {}
        return int(sum(ends.values()))

    async def close() -> None:
        await consumer.stop()
        await admin.close()

    return count, close


# --- the verdict (pure) -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Check:
    """One pass/fail line: ``what`` measured ``value`` against ``bound`` (``detail`` explains)."""

    name: str
    ok: bool
    detail: str


def slope_per_hour(t_s: Sequence[float], values: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope of ``values`` over ``t_s`` (seconds), per hour, and its standard
    error; (nan, nan) with fewer than three points."""
    from scipy.stats import linregress

    if len(t_s) < 3 or len(set(t_s)) < 2:
        return math.nan, math.nan
    fit = linregress([t / 3600 for t in t_s], list(values))
    return float(fit.slope), float(fit.stderr)


def second_half(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples of the run's second half by time (the first half is warm-up)."""
    if not samples:
        return []
    middle = (samples[0]["t_s"] + samples[-1]["t_s"]) / 2
    return [s for s in samples if s["t_s"] >= middle]


def checks(
    samples: Sequence[dict[str, Any]],
    *,
    rss_slope_mib_h: float,
    broker_kib_per_record: float,
    lag_slope_per_h: float,
    retention_failed: int,
) -> list[Check]:
    """The soak's checks over its samples (see the module docstring); pure."""
    late = second_half(samples)
    t = [s["t_s"] for s in late]
    out = []
    for name, column in (
        ("worker", "worker_rss_mib"),
        ("gate", "gate_rss_mib"),
        ("postgres", "postgres_pss_mib"),
        ("broker", "broker_rss_mib"),
    ):
        slope, err = slope_per_hour(t, [s[column] for s in late])
        bound, held = rss_slope_mib_h, ""
        if name == "broker":
            records, _ = slope_per_hour(t, [s["broker_records"] for s in late])
            allowance = max(0.0, records) * broker_kib_per_record / 1024
            bound += 0.0 if math.isnan(allowance) else allowance
            held = (
                f" ({rss_slope_mib_h:g} + {allowance:.1f} for the {records:,.0f} records/h it "
                "came to hold)"
            )
        ok = not math.isnan(slope) and slope <= bound
        what = "PSS" if column.endswith("pss_mib") else "RSS"
        out.append(
            Check(
                f"{name} {what} slope",
                ok,
                f"{slope:+.1f} ± {err:.1f} MiB/h over the second half ({len(late)} samples), "
                f"bound {bound:.1f}{held}"
                + (": too few samples to fit" if math.isnan(slope) else ""),
            )
        )
    everything = [s["t_s"] for s in samples]
    slope, err = slope_per_hour(everything, [s["consumer_lag"] for s in samples])
    out.append(
        Check(
            "consumer lag slope",
            not math.isnan(slope) and slope <= lag_slope_per_h,
            f"{slope:+,.0f} ± {err:,.0f} records/h over the run ({len(samples)} samples), bound "
            f"{lag_slope_per_h:,.0f}; last {samples[-1]['consumer_lag'] if samples else 0:,.0f}",
        )
    )
    errors = int(samples[-1]["error_lines"]) if samples else 0
    out.append(Check("error log lines", errors == 0, f"{errors} (bound 0)"))
    out.append(
        Check("retention runs with a failed step", retention_failed == 0, f"{retention_failed}")
    )
    return out


def proofs(
    n: Counts,
    stored: tuple[int, int, int, int, int],
    metrics: dict[str, float],
    args: argparse.Namespace,
    seconds: float,
    others: Sequence[float],
) -> list[Check]:
    """That the claimed load ran and the machine was quiet (see the module docstring); pure.
    ``stored``: events stored per source (Kafka, HTTP, OTLP, gate decisions) after the drain."""
    kafka, http, otlp, decisions = stored[:4]
    judged = metrics.get("monitor_judged_conversations_total", 0.0)
    rejudged = metrics.get("monitor_judge_rejudges_total", 0.0)

    def rate(name: str, done: float, target: float, unit: str) -> Check:
        got = done / seconds if seconds else 0.0
        return Check(
            f"{name} rate",
            target <= 0 or got >= VALID_SHARE * target,
            f"{got:,.1f} {unit}/s of {target:g} (at least {VALID_SHARE:.0%})",
        )

    out = [
        Check("kafka events stored", kafka == n.kafka_sent, f"{kafka:,} of {n.kafka_sent:,} sent"),
        rate("kafka", n.kafka_sent, args.rate, "events"),
        Check(
            "http events stored",
            http == n.http_accepted == n.http_posted and n.http_failed_requests == 0,
            f"{http:,} stored of {n.http_accepted:,} accepted of {n.http_posted:,} posted "
            f"({n.http_failed_requests} requests failed)",
        ),
        rate("http", n.http_accepted, args.http_rate, "events"),
        Check(
            "otlp spans accepted",
            n.otlp_rejected_spans == 0
            and n.otlp_failed_requests == 0
            and otlp == n.otlp_expected_events,
            f"{n.otlp_spans:,} spans in {n.otlp_requests:,} requests, {n.otlp_rejected_spans} "
            f"rejected, {n.otlp_failed_requests} requests failed; {otlp:,} events stored of "
            f"{n.otlp_expected_events:,} mapped",
        ),
        rate("otlp", n.otlp_conversations, args.otlp_rate, "conversations"),
        Check(
            "gate calls answered",
            n.gate_answered == n.gate_calls
            and n.gate_no_event == 0
            and decisions == n.gate_decisions,
            f"{n.gate_answered:,} of {n.gate_calls:,} answered ({n.gate_failed} failed, "
            f"{n.gate_no_event} in the rule's fail mode, with no decision event); "
            f"{decisions:,} decision events stored of {n.gate_decisions:,} answered with one",
        ),
        rate("gate", n.gate_answered, args.gate_rate, "calls"),
        Check(
            "judges judged",
            judged > 0 or seconds < JUDGED_AFTER_S,
            f"{judged:,.0f} conversations ({rejudged:,.0f} again)"
            + (f"; not required under {JUDGED_AFTER_S:.0f} s" if seconds < JUDGED_AFTER_S else ""),
        ),
    ]
    runs = metrics.get("sum:monitor_retention_runs_total", 0.0)
    due = 1 + int(seconds // args.retention_s)  # one at start, then one per interval
    out.append(
        Check("retention ran", runs >= due - 1, f"{runs:.0f} runs, {due} due (one may be late)")
    )
    busy = statistics.mean(others) if others else 0.0
    out.append(
        Check(
            "machine quiet",
            busy <= args.quiet_cores,
            f"other processes used {busy:.2f} cores on average (max {max(others, default=0):.2f},"
            f" bound {args.quiet_cores:g})",
        )
    )
    return out


# --- output -------------------------------------------------------------------------------


def write_samples(out: Path, samples: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    with (out / "samples.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(samples)
    (out / "samples.json").write_text(json.dumps({**summary, "samples": samples}, indent=1))


def plot(out: Path, samples: list[dict[str, Any]], title: str) -> Path:
    """soak.png: memory, lag and stalls, table sizes, the machine's load, over minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s["t_s"] / 60 for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(10, 13), sharex=True)
    ax = axes[0]
    for p in PROCESSES:
        ax.plot(minutes, [s[f"{p}_rss_mib"] for s in samples], label=f"{p} RSS")
    ax.plot(minutes, [s["postgres_pss_mib"] for s in samples], "--", label="postgres PSS")
    ax.set_ylabel("MiB")
    ax.legend(loc="upper left", fontsize="small")
    ax.set_title(title, fontsize="medium")
    ax = axes[1]
    ax.plot(minutes, [s["consumer_lag"] for s in samples], color="tab:red", label="consumer lag")
    ax.set_ylabel("records behind")
    twin = ax.twinx()
    twin.plot(
        minutes,
        [s["worker_loop_stall_s"] * 1000 for s in samples],
        color="tab:purple",
        label="longest loop stall, last minute",
    )
    twin.set_ylabel("ms")
    ax.legend(loc="upper left", fontsize="small")
    twin.legend(loc="upper right", fontsize="small")
    ax = axes[2]
    for t in TABLES:
        series = [s[f"size_{t}_mib"] for s in samples]
        if max(series, default=0) >= 0.5:  # the small ones would only crowd the legend
            ax.plot(minutes, series, label=t)
    ax.set_ylabel("MiB (with indexes)")
    ax.legend(loc="upper left", fontsize="x-small", ncol=2)
    ax = axes[3]
    ax.plot(minutes, [s["load_1m"] for s in samples], label="load average (1 min)")
    ax.plot(minutes, [s["other_cores"] for s in samples], label="cores used by others")
    ax.set_xlabel("minutes")
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    path = out / "soak.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def report(checked: list[Check], proved: list[Check], samples: list[dict[str, Any]]) -> None:
    first, last = samples[0], samples[-1]
    print("\nper process (MiB):  start -> end")
    for p in PROCESSES:
        print(f"  {p:8} RSS {first[f'{p}_rss_mib']:8.1f} -> {last[f'{p}_rss_mib']:8.1f}")
    print(f"  postgres PSS {first['postgres_pss_mib']:8.1f} -> {last['postgres_pss_mib']:8.1f}")
    stalls = [s["worker_loop_stall_s"] for s in samples]
    print(
        f"worker loop: longest stall {max(stalls) * 1000:.0f} ms; wake-ups over 100 ms late: "
        f"{last['worker_loop_lags_over_100ms']:.0f}; consumer lag max "
        f"{max(s['consumer_lag'] for s in samples):,.0f}"
    )
    print("tables (MiB): " + ", ".join(f"{t} {last[f'size_{t}_mib']:.1f}" for t in TABLES[:8]))
    print("\nload proof:")
    for c in proved:
        print(f"  [{'ok' if c.ok else 'NOT OK'}] {c.name}: {c.detail}")
    print("checks:")
    for c in checked:
        print(f"  [{'pass' if c.ok else 'FAIL'}] {c.name}: {c.detail}")


# --- the run ------------------------------------------------------------------------------


async def drain(sampler: Sampler, load: Load, timeout_s: float) -> tuple[int, int, int, int, int]:
    """Wait (at most ``timeout_s``) until every source's events are stored; what is stored."""
    n = load.n
    want = (n.kafka_sent, n.http_accepted, n.otlp_expected_events, n.gate_decisions)
    deadline = time.monotonic() + timeout_s
    while True:
        stored = await sampler.stored()
        if stored[:4] == want or time.monotonic() > deadline:
            return stored
        await asyncio.sleep(1.0)


SOURCES = ("kafka", "http", "otlp", "gate")
#: the ids traced one by one (dead letters, topic) per source; the rest are only counted
TRACED = 200
#: the longest read of the events topic when tracing (its partitions holding a missing id)
TOPIC_SCAN_S = 300.0
FOUND_KEYS = """
SELECT k::text FROM unnest($1::uuid[]) AS k
WHERE EXISTS (SELECT 1 FROM event_ids WHERE event_key = k)
"""
DEAD_LETTERS_OF = """
SELECT id, reason, field, left(detail, 300) AS detail, source, source_partition, source_offset,
       received_at::text AS received_at
FROM dead_letters WHERE position($1::bytea IN raw) > 0 ORDER BY id LIMIT 3
"""


def conversation_of(event_id: str) -> str:
    """The conversation of a simulated event's id (``<conversation_id>:<position>``)."""
    return event_id.rsplit(":", 1)[0]


def acknowledged_ids(n: Counts) -> dict[str, list[tuple[str, str]]]:
    """Per source, the ``(event id, conversation id)`` of every event its receiver
    acknowledged (gate: every decision event an answer named); pure."""
    return {
        "kafka": [(i, conversation_of(i)) for i in n.kafka_ids[: n.kafka_sent]],
        "http": [(i, conversation_of(i)) for i in n.http_ids],
        "otlp": list(n.otlp_ids.items()),
        "gate": list(n.gate_ids.items()),
    }


def needle(event_id: str) -> bytes:
    """The bytes of ``event_id`` in an event's compact JSON (``AgentEvent.to_json``)."""
    return b'"event_id":' + json.dumps(event_id).encode()


async def ids_stored(db: asyncpg.Connection, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` are claimed in ``event_ids`` (the writer's de-duplication keys; the
    keys of an emptied unsampled leaf are deleted with it, so an old event may be stored and
    not found)."""
    by_key = {uuid.UUID(event_key(i)): i for i in ids}
    keys = list(by_key)
    found: set[str] = set()
    for lo in range(0, len(keys), 20_000):
        rows = await db.fetch(FOUND_KEYS, keys[lo : lo + 20_000])
        found.update(by_key[uuid.UUID(r[0])] for r in rows)
    return found


async def in_topic(
    bootstrap: str, settings: Settings, wanted: dict[str, str], timeout_s: float
) -> tuple[dict[str, dict[str, int | None]], str | None]:
    """Where the events topic (``settings.topic_events`` on ``bootstrap``) holds the ids of
    ``wanted`` (event id: conversation id, which names the partition as the producers'
    partitioner does): per id found, its partition, offset and the committed offset there of
    the worker's group (``settings.consumer_group``); and why the read stopped short, if it
    did."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topic = settings.topic_events
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    # of the worker's group, only asked its committed offsets (OffsetFetch): it joins nothing
    group = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=settings.consumer_group, enable_auto_commit=False
    )
    await consumer.start()
    await group.start()
    found: dict[str, dict[str, int | None]] = {}
    try:
        await consumer.topics()  # the cluster's metadata, fetched
        parts = sorted(consumer.partitions_for_topic(topic) or ())
        if not parts:
            return found, f"the broker knows no partition of {topic}"
        needles: dict[int, dict[bytes, str]] = {}
        for event_id, cid in wanted.items():
            partition = parts[key_hash(cid.encode()) % len(parts)]
            needles.setdefault(partition, {})[needle(event_id)] = event_id
        tps = [TopicPartition(topic, p) for p in needles]
        committed = {tp.partition: await group.committed(tp) for tp in tps}
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        left = {tp for tp in tps if ends[tp] > 0}
        while left:
            if time.monotonic() > deadline:
                return found, f"read for {timeout_s:.0f} s, not to the end"
            batch = await consumer.getmany(*left, timeout_ms=1000, max_records=5000)
            for tp, records in batch.items():
                for record in records:
                    for text, event_id in needles[tp.partition].items():
                        if text in (record.value or b""):
                            found[event_id] = {
                                "partition": tp.partition,
                                "offset": record.offset,
                                "committed": committed.get(tp.partition),
                            }
                if records and records[-1].offset + 1 >= ends[tp]:
                    left.discard(tp)
        return found, None
    finally:
        await consumer.stop()
        await group.stop()


async def trace_missing(
    db: asyncpg.Connection,
    bootstrap: str,
    settings: Settings,
    n: Counts,
    want: Sequence[int],
    stored: Sequence[int],
) -> dict[str, Any]:
    """Per source whose stored count differs from what its receiver acknowledged: the ids not
    found in ``event_ids`` and, for the first :data:`TRACED`, where each is (module
    docstring)."""
    out: dict[str, Any] = {}
    wanted: dict[str, str] = {}
    for source, ids in acknowledged_ids(n).items():
        i = SOURCES.index(source)
        if want[i] == stored[i]:
            continue
        present = await ids_stored(db, [e for e, _ in ids])
        gone = [(e, c) for e, c in ids if e not in present]
        out[source] = {
            "acknowledged": want[i],
            "stored": stored[i],
            "ids_known": len(ids),
            "ids_not_found": len(gone),
            "missing": [],
        }
        for event_id, cid in gone[:TRACED]:
            dead = [dict(r) for r in await db.fetch(DEAD_LETTERS_OF, needle(event_id))]
            out[source]["missing"].append(
                {"event_id": event_id, "conversation_id": cid, "dead_letters": dead}
            )
            if not dead:
                wanted[event_id] = cid
    found, short = ({}, None)
    if wanted:
        found, short = await in_topic(bootstrap, settings, wanted, TOPIC_SCAN_S)
    for source in out.values():
        for m in source["missing"]:
            where = found.get(m["event_id"])
            m["topic"] = where
            if m["dead_letters"]:
                m["where"] = "dead_letters"
            elif where is None:
                m["where"] = "nowhere" if short is None else f"not in the topic as read ({short})"
            elif where["committed"] is not None and where["offset"] < where["committed"]:
                m["where"] = "topic, below the worker's committed offset: skipped by the consumer"
            else:
                m["where"] = "topic, not consumed yet"
    return out


def missing_lines(traced: dict[str, Any]) -> list[str]:
    """The trace of the missing ids in a few lines (counts by where, the first ids); pure."""
    lines = []
    for source, t in traced.items():
        lines.append(
            f"  {source}: {t['stored']:,} stored of {t['acknowledged']:,} acknowledged; "
            f"{t['ids_not_found']:,} of {t['ids_known']:,} ids not in event_ids"
        )
        wheres: dict[str, int] = {}
        for m in t["missing"]:
            wheres[m["where"]] = wheres.get(m["where"], 0) + 1
        for where, count in wheres.items():
            lines.append(f"    {count} {where}")
        for m in t["missing"][:5]:
            at = m["topic"] or (m["dead_letters"][0] if m["dead_letters"] else {})
            lines.append(f"    {m['event_id']}: {m['where']} {at}")
    return lines


async def soak(
    args: argparse.Namespace, stack: Stack, running: Running, hook_port: int
) -> dict[str, Any]:
    """Run the load, sample, drain, and return the samples and verdicts."""
    load = Load(args, running)
    state = stack.state_dir
    errors = ErrorLines(
        {
            "worker": (state / "worker.log", PYTHON_ERROR),
            "gate": (state / "gate.log", PYTHON_ERROR),
            "broker": (state / "tansu.log", TANSU_ERROR),
            "postgres": (state / "pg" / "server.log", POSTGRES_ERROR),
        }
    )
    db = await asyncpg.connect(running.database_url)
    records, close_records = await records_counter(running.kafka_bootstrap)
    sampler = Sampler(stack, running, load, db, errors, records)
    samples: list[dict[str, Any]] = []
    traced: dict[str, Any] = {}  # the missing ids, when some are (trace_missing)
    texts: dict[str, str] = {}  # the worker's and the gate's /metrics then
    duration = args.minutes * 60
    marks = [k * args.sample_s for k in range(int(duration // args.sample_s) + 1)]
    if duration - marks[-1] > 1e-6:
        marks.append(duration)  # a last sample at the end
    try:
        async with webhook(hook_port, load.n):
            tasks, t0 = await load.start()
            try:
                for mark in marks:
                    await asyncio.sleep(max(0.0, t0 + mark - time.monotonic()))
                    stack.check_worker()
                    for task in tasks:
                        if task.done() and task.exception():
                            raise RuntimeError(f"the {task.get_name()} load failed") from (
                                task.exception()
                            )
                    samples.append(await sampler.sample(t0))
                    s = samples[-1]
                    print(
                        f"[{s['t_s'] / 60:5.1f} min] RSS worker {s['worker_rss_mib']:.0f} gate "
                        f"{s['gate_rss_mib']:.0f} broker {s['broker_rss_mib']:.0f} postgres "
                        f"{s['postgres_rss_mib']:.0f} (PSS {s['postgres_pss_mib']:.0f}) MiB | lag "
                        f"{s['consumer_lag']:.0f} | stall {s['worker_loop_stall_s'] * 1000:.0f} "
                        f"ms | errors {s['error_lines']} | stored {s['events_stored']:,} | "
                        f"others {s['other_cores']:.2f} cores",
                        flush=True,
                    )
            finally:
                load.stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
            seconds = time.monotonic() - t0
            stored = await drain(sampler, load, args.drain_s)
            metrics = await sampler.worker_metrics()
            samples[-1]["error_lines"] = await asyncio.to_thread(errors.scan)
            n = load.n
            want = (n.kafka_sent, n.http_accepted, n.otlp_expected_events, n.gate_decisions)
            if tuple(stored[:4]) != want:  # before the stack stops: the broker keeps no files
                print("- not everything stored: tracing the missing ids", flush=True)
                try:  # the run's figures are worth more than the trace: it must not lose them
                    traced["sources"] = await trace_missing(
                        db, running.kafka_bootstrap, running.settings, n, want, stored
                    )
                    gate = await sampler.http.get(f"{running.gate_url}/health")
                    traced["gate_health"] = gate.json()
                    for name, url in (("worker", running.web_url), ("gate", running.gate_url)):
                        texts[name] = (await sampler.http.get(f"{url}/metrics")).text
                except Exception as exc:
                    traced["error"] = f"the trace failed: {exc!r}"
    finally:
        await sampler.aclose()
        await close_records()
        await db.close()
    checked = checks(
        samples,
        rss_slope_mib_h=args.rss_slope_mib_h,
        broker_kib_per_record=args.broker_kib_per_record,
        lag_slope_per_h=args.lag_slope_per_h,
        retention_failed=int(metrics.get('monitor_retention_runs_total{result="partial"}', 0.0)),
    )
    proved = proofs(load.n, stored, metrics, args, seconds, [s["other_cores"] for s in samples[1:]])
    gate_ms = sorted(load.n.gate_ms)
    return {
        "samples": samples,
        "checks": checked,
        "proofs": proved,
        "error_examples": errors.examples,
        "load_errors": load.n.errors,
        "missing": traced,
        "metrics_texts": texts,
        "summary": {
            "seconds": round(seconds, 1),
            "sent": {
                "kafka_events": load.n.kafka_sent,
                "http_events": load.n.http_accepted,
                "otlp_spans": load.n.otlp_spans,
                "gate_calls": load.n.gate_calls,
                "gate_decisions": load.n.gate_decisions,
            },
            "stored": dict(zip(("kafka", "http", "otlp", "gate", "all"), stored, strict=True)),
            "gate_ms_p50_p99": [
                gate_ms[int(q * (len(gate_ms) - 1))] if gate_ms else None for q in (0.5, 0.99)
            ],
            "alert_notifications": load.n.notifications,
            "judged": metrics.get("monitor_judged_conversations_total", 0.0),
            "rejudged": metrics.get("monitor_judge_rejudges_total", 0.0),
            "retention_rows_deleted": metrics.get("sum:monitor_retention_rows_deleted_total", 0.0),
            "retention_leaves_emptied": metrics.get(
                'monitor_retention_partitions_total{action="emptied"}', 0.0
            ),
        },
    }


def positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


class Help(argparse.ArgumentDefaultsHelpFormatter):
    """--help with the defaults, except the ones that are none (required, flags, computed)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/soak.py",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        formatter_class=Help,
        epilog="Exit status: 0 every check passed; 1 a check failed (memory or lag growing beyond "
        "its bound, an error logged); 2 the load is not proven or the machine was busy (the "
        "figures are printed marked INVALID; --allow-busy accepts a busy machine).",
    )
    parser.add_argument("--minutes", type=positive, required=True, help="How long the load runs.")
    parser.add_argument("--sample-s", type=positive, default=60.0, help="Seconds between samples.")
    parser.add_argument("--rate", type=positive, default=80.0, help="Kafka (SDK) events/s.")
    parser.add_argument("--http-rate", type=float, default=20.0, help="/v1/events events/s.")
    parser.add_argument("--otlp-rate", type=float, default=1.0, help="/v1/traces conversations/s.")
    parser.add_argument("--gate-rate", type=float, default=5.0, help="/v1/gate calls/s.")
    parser.add_argument("--drift-s", type=positive, default=60.0, help="Drift check interval.")
    parser.add_argument("--retention-s", type=positive, default=60.0, help="Retention interval.")
    parser.add_argument(
        "--rss-slope-mib-h",
        type=float,
        default=10.0,
        help="Bound on the RSS slope (MiB/hour) of the worker and the gate, and on Postgres's "
        "PSS slope, over the second half of the run.",
    )
    parser.add_argument(
        "--broker-kib-per-record",
        type=float,
        default=2.0,
        help="The broker's RSS slope may exceed --rss-slope-mib-h by this many KiB per record "
        "it came to hold (its memory store keeps every record).",
    )
    parser.add_argument(
        "--lag-slope-per-h",
        type=float,
        default=3600.0,
        help="Bound on the consumer lag's slope over the run (records/hour).",
    )
    parser.add_argument(
        "--quiet-cores",
        type=float,
        default=0.3,
        help="Most cores other processes may use on average for the run to count as measured "
        "on a quiet machine.",
    )
    parser.add_argument(
        "--allow-busy",
        action="store_true",
        help="A busy machine does not make the run invalid (it is still reported).",
    )
    parser.add_argument(
        "--drain-s", type=positive, default=180.0, help="Longest wait for the stores at the end."
    )
    parser.add_argument("--seed", type=int, default=7, help="Simulator seed.")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="Directory of samples.csv, samples.json, soak.png and the logs (default: "
        "reports/soak-<UTC time>).",
    )
    args = parser.parse_args(argv)
    if args.sample_s > args.minutes * 60:
        parser.error("--sample-s is longer than the run")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    out: Path = args.out or Path("reports") / f"soak-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    hook_port = free_port()
    print(
        f"soak: {args.minutes:g} min, samples every {args.sample_s:g} s; load: {args.rate:g} "
        f"Kafka + {args.http_rate:g} HTTP events/s, {args.otlp_rate:g} OTLP conversations/s, "
        f"{args.gate_rate:g} gate calls/s; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores; output in {out}",
        flush=True,
    )
    workdir = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    keep = True  # unless the load is proven: a failed run's state is what explains it
    try:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            state_dir=workdir / "state",
            kafka_bootstrap=None,  # the embedded stack, whatever the environment names
            database_url=None,
            ingest_token=TOKEN,
        )
        stack = Stack(
            settings,
            broker_port=0,
            pg_port=0,
            web_port=0,
            gate_port=0,
            say=lambda msg: print(f"- {msg}", flush=True),
            env=soak_env(args, f"http://127.0.0.1:{hook_port}/hook"),
        )
        try:
            running = stack.start()
            result = asyncio.run(soak(args, stack, running, hook_port))
        finally:
            stack.stop()
            logs = out / "logs"
            logs.mkdir(exist_ok=True)
            for log in (*stack.state_dir.glob("*.log"), stack.state_dir / "pg" / "server.log"):
                with contextlib.suppress(OSError):
                    shutil.copy(log, logs / log.name)
        samples, checked, proved = result["samples"], result["checks"], result["proofs"]
        load_ok = all(c.ok for c in proved if c.name != "machine quiet")
        keep = not load_ok
    finally:
        if keep:
            print(
                f"state directory kept: {workdir / 'state'} (Postgres's data in pg/, the gate's "
                "disk buffer in gate-buffer*/, the logs; remove it when done)",
                flush=True,
            )
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    quiet = all(c.ok for c in proved if c.name == "machine quiet")
    valid = load_ok and (quiet or args.allow_busy)
    passed = all(c.ok for c in checked)
    verdict = "PASS" if passed else "FAIL"
    if not valid:
        verdict = f"INVALID ({'load not proven' if not load_ok else 'machine busy'}), {verdict}"
    elif not quiet:
        verdict += " (machine busy: --allow-busy, figures not from a quiet machine)"
    summary = {
        "verdict": verdict,
        "args": {k: str(v) for k, v in vars(args).items()},
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        **result["summary"],
        "checks": [dataclasses.asdict(c) for c in checked],
        "proofs": [dataclasses.asdict(c) for c in proved],
        "error_examples": result["error_examples"],
        "load_errors": result["load_errors"],
        "state_dir_kept": str(workdir / "state") if keep else None,
    }
    write_samples(out, samples, summary)
    if result["missing"]:
        (out / "missing.json").write_text(json.dumps(result["missing"], indent=1, default=str))
        for name, text in result["metrics_texts"].items():
            (out / f"{name}-metrics.txt").write_text(text)
    title = f"bench/soak.py --minutes {args.minutes:g}, {stamp} UTC: {verdict}"
    png = plot(out, samples, title)
    report(checked, proved, samples)
    for line in result["error_examples"][:5]:
        print(f"  error line: {line}")
    for line in result["load_errors"][:5]:
        print(f"  load failure: {line}")
    if result["missing"]:
        print(f"missing ids (the first {TRACED} per source traced in {out / 'missing.json'}):")
        for line in missing_lines(result["missing"].get("sources", {})):
            print(line)
        if "error" in result["missing"]:
            print(f"  {result['missing']['error']}")
    print(json.dumps({k: summary[k] for k in ("verdict", "sent", "stored", "gate_ms_p50_p99")}))
    print(f"\n{verdict}: samples in {out / 'samples.csv'}, plot {png}")
    if not valid:
        return 2
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
