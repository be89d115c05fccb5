"""``monitor up``: the whole pipeline on one machine, fed with simulated traffic (``make demo``).

Thin CLI over :mod:`monitor.stack.runner` (start/stop) and :mod:`monitor.stack.demo` (traffic).
Exit codes: 0 done; 1 something failed (or not everything landed in time); 2 bad settings;
130 Ctrl-C (143 SIGTERM). Whatever the exit, everything this command started is stopped.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import asyncpg
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy.exc import SQLAlchemyError

from monitor.cli.replay import fail
from monitor.cli.up_alerts import print_alerts
from monitor.cli.up_analytics import print_analytics, print_report
from monitor.cli.up_gate import print_gate
from monitor.cli.up_view import print_next_steps, print_summary
from monitor.config import load_settings
from monitor.contract.events import AgentEvent
from monitor.core.errors import MonitorError, StackBusy, WorkerFailed
from monitor.gate.effect import DECISIONS
from monitor.replay.send import ReplayReport
from monitor.stack.demo import (
    TrafficPlan,
    malformed_events,
    plan_traffic,
    send_traffic,
    wait_until_stored,
)
from monitor.stack.demo_gate import GatedRun, ask_and_send, plan_gated
from monitor.stack.runner import Running, Stack, shown_url

INGEST_TIMEOUT_S = 60.0


HELP = """Run the whole pipeline locally and show it working: the `make demo` command.

With no broker or database configured (MONITOR_KAFKA_BOOTSTRAP, DATABASE_URL) it
starts the embedded ones: the Tansu Kafka broker and a Postgres whose data stays in
the state dir (./.monitor/pg) until the next run, migrated. A configured broker or database is used
instead. Then it starts the worker, sends DURATION seconds of simulated traffic from
four agents (calibrated, overconfident, drifting, inverted) plus 5 malformed events,
and beside them three agents that ask the runtime trust gate before they answer (two obey
it, one ignores it), waits until everything is in Postgres and prints what landed:
conversations per agent, events by type, dead letters by reason, the gate's decisions with
the failures they prevented and the human cost, and where to look next.

Ctrl-C at any time stops everything it started; rerunning is safe: each run starts
clean (the embedded database of the previous run is dropped; a configured database is
kept as it is, and the run says so). Other commands (replay, simulate, worker) in
another terminal find the running stack through STATE_DIR/endpoints.json. Logs:
STATE_DIR/worker.log, STATE_DIR/tansu.log, STATE_DIR/pg/server.log.
"""


class _Signals:
    """SIGTERM takes the Ctrl-C path (remembering it was SIGTERM); ``quiet()`` ignores both."""

    def __init__(self) -> None:
        self.terminated = False
        self._saved_int = signal.getsignal(signal.SIGINT)
        self._saved = signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.terminated = True
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # e.g. a background job
            raise KeyboardInterrupt
        signal.raise_signal(signal.SIGINT)  # inside asyncio.run: cancels the main task

    def quiet(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def restore(self) -> None:
        signal.signal(signal.SIGINT, self._saved_int)
        signal.signal(signal.SIGTERM, self._saved)


def _simulate(
    console: Console, running: Running, plan: TrafficPlan, gated: GatedRun, rate: float
) -> tuple[ReplayReport, int]:
    """Send the plan and, beside it, the gated conversations (asking the gate, then sending
    at a rate that ends with the plan); the returned report counts both and the gate's
    decision events (the worker publishes those)."""
    s = running.settings
    console.print(
        f"Sending {plan.events:,} simulated events ({plan.conversations:,} conversations, "
        f"{len(plan.simulator.agents)} agents) at {rate:g} events/s to [bold]{s.topic_events}[/],"
        f" and beside them {gated.conversations:,} conversations whose agents ask the gate "
        f"first, plus {len(malformed_events(plan.marker))} deliberately "
        "malformed ones that must end up in the dead-letter queue.",
        soft_wrap=True,
    )
    columns = (
        TextColumn("simulating"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("events"),
        TimeElapsedColumn(),
    )
    started = time.monotonic()
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("events", total=plan.events)

        async def both() -> tuple[tuple[ReplayReport, int], tuple[list[AgentEvent], float]]:
            return await asyncio.gather(
                send_traffic(
                    plan,
                    running.kafka_bootstrap,
                    s.topic_events,
                    idempotent=s.kafka_idempotent,
                    rate=rate,
                    on_event=lambda: progress.advance(task),
                ),
                ask_and_send(
                    gated,
                    running.gate_url,
                    s.gate_token,
                    running.kafka_bootstrap,
                    s.topic_events,
                    idempotent=s.kafka_idempotent,
                    seconds=plan.events / rate,
                    on_event=lambda: progress.advance(task),
                    on_total=lambda n: progress.update(task, total=plan.events + n),
                ),
            )

        (report, bad), (gated_events, asked) = asyncio.run(both())
    elapsed = time.monotonic() - started
    for event in gated_events:
        report.counts.add(event)
    decisions = len(gated.decisions) - gated.unanswered  # one decision event each (worker)
    report.counts.by_type["gate"] += decisions
    report.sent += len(gated_events) + decisions
    kinds = [sum(d == k for d in gated.decisions.values()) for k in DECISIONS]
    console.print(
        f"sent {report.sent:,} events and {bad} malformed ones in {elapsed:.1f} s "
        f"({len(gated_events):,} of them in the gated agents' conversations, "
        f"{decisions:,} the gate's decision events, which the worker publishes; "
        f"asking the gate about {gated.conversations:,} drafts took {asked:.1f} s: "
        f"{kinds[0]} proceed, {kinds[1]} revise, {kinds[2]} escalate)",
        soft_wrap=True,
    )
    return report, bad


def _intro(bootstrap: str | None, database_url: str | None, state_dir: Path) -> str:
    embedded = [
        name
        for name, value in (("the Tansu broker", bootstrap), ("Postgres", database_url))
        if value is None
    ]
    used = [
        f"{name} {value}"
        for name, value in (
            ("the configured broker", bootstrap),
            ("the configured database", database_url and shown_url(database_url)),
        )
        if value
    ]
    parts = (
        [f"starting {' and '.join(embedded)} (embedded; data and logs in {state_dir})"]
        if embedded
        else []
    ) + ([f"using {' and '.join(used)}"] if used else [])
    return (
        f"[bold]monitor up[/]: {'; '.join(parts)}, then the worker and the simulated "
        "traffic. Ctrl-C stops everything at any time."
    )


def run_up(
    console: Console,
    *,
    settings_dir: Path | None,
    duration: float,
    rate: float,
    seed: int,
    keep_running: bool,
    ports: tuple[int, int, int, int, int],
) -> int:
    """Everything ``monitor up`` does; returns the exit code (see the module docstring)."""
    try:
        settings = load_settings(**({"state_dir": settings_dir} if settings_dir else {}))
    except ValidationError as exc:
        fail(f"invalid MONITOR_* settings: {exc}", 2)
    stack = Stack(
        settings,
        broker_port=ports[0],
        pg_port=ports[1],
        web_port=ports[2],
        gate_port=ports[3],
        grpc_port=ports[4],
        say=lambda msg: console.print(f"[dim]-[/] {escape(msg)}", soft_wrap=True),
    )
    signals = _Signals()
    code = 0
    console.print(
        _intro(settings.kafka_bootstrap, settings.database_url, stack.state_dir), soft_wrap=True
    )
    try:
        running = stack.start()
        console.print(
            f"[green]The stack is up[/]: broker {running.kafka_bootstrap}, database "
            f"{shown_url(running.database_url)}, worker {running.web_url} (OTLP/gRPC "
            f"{running.otlp_grpc}), gate {running.gate_url}",
            soft_wrap=True,
            highlight=False,
        )
        console.print(
            f"HTTP ingest token: [bold]{running.ingest_token}[/]"
            + (
                " (generated for this run; set MONITOR_INGEST_TOKEN to choose your own)"
                if running.token_generated
                else " (MONITOR_INGEST_TOKEN)"
            ),
            soft_wrap=True,
        )
        plan = plan_traffic(seed, duration, rate, datetime.now(UTC))
        gated = plan_gated(plan, seed, datetime.now(UTC))
        report, bad = _simulate(console, running, plan, gated, rate)
        expected = (report.sent, bad)
        with console.status("waiting for the worker to write everything to Postgres") as status:
            counts, summary = asyncio.run(
                wait_until_stored(
                    running.database_url,
                    plan.scope,
                    expected,
                    timeout_s=INGEST_TIMEOUT_S,
                    alive=stack.worker_alive,
                    on_poll=lambda c: status.update(
                        f"waiting for the worker: {c[0]:,}/{expected[0]:,} events, "
                        f"{c[1]}/{expected[1]} dead letters stored"
                    ),
                )
            )
        stack.check_worker()
        print_summary(console, plan, report, summary)
        print_gate(console, running.database_url, plan, gated)
        print_analytics(console, running.database_url, plan, running.settings.state_dir)
        print_alerts(console, running.database_url, plan)
        print_report(console, running.database_url, plan, running.settings.state_dir)
        if counts[0] < expected[0] or counts[1] < expected[1]:
            code = 1
            console.print(
                f"[red]not everything landed within {INGEST_TIMEOUT_S:.0f} s[/]: missing "
                f"{expected[0] - counts[0]:,} event(s) and {expected[1] - counts[1]} dead "
                f"letter(s); see {stack.state_dir / 'worker.log'}",
                soft_wrap=True,
            )
        print_next_steps(console, running, keep_running)
        if keep_running:
            console.print("[green]The stack keeps running.[/] Press Ctrl-C to stop it.")
            while True:
                time.sleep(1)
                stack.check_worker()
    except KeyboardInterrupt:
        code = 143 if signals.terminated else 130
        console.print("\n[yellow]interrupted[/]: stopping everything that was started")
    except WorkerFailed as exc:
        code = 1
        console.print(f"[red]error:[/] {escape(str(exc))}; the end of its log:", soft_wrap=True)
        console.print(escape(exc.log_tail), soft_wrap=True, highlight=False)
    except StackBusy as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return 1  # nothing was started
    except (MonitorError, OSError, asyncpg.PostgresError, SQLAlchemyError) as exc:
        code = 1
        console.print(
            f"[red]error:[/] {escape(type(exc).__name__)}: {escape(str(exc))}", soft_wrap=True
        )
    finally:
        signals.quiet()  # a second Ctrl-C must not leave half the stack running
        try:
            stopped = stack.stop()
        finally:
            signals.restore()
    if stopped:
        console.print("stopped: nothing that `monitor up` started is left running.")
    else:
        console.print(
            "[red]stopped, but not cleanly[/]: see above; the next `monitor up` on "
            f"{stack.state_dir} stops what is left.",
            soft_wrap=True,
        )
        code = code or 1
    return code


def _reflow(doc: str) -> str:
    """A docstring as help text: paragraphs joined into single lines (the terminal wraps)."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def port_option(default: int, flag: str, what: str) -> Any:
    """A ``--*-port`` option: ``default`` is preferred, a free port is taken when it is busy."""
    return typer.Option(
        default,
        flag,
        min=0,
        max=65535,
        help=f"Preferred port of {what}; a free one if taken (0: any).",
    )


def register(app: typer.Typer) -> None:
    @app.command("up", help=_reflow(HELP))
    def up(
        duration: float = typer.Option(
            60.0,
            "--duration",
            min=1.0,
            metavar="SECONDS",
            help="How long to send simulated traffic (about DURATION x RATE events).",
        ),
        rate: float = typer.Option(200.0, "--rate", min=1.0, help="Simulated events per second."),
        seed: int = typer.Option(7, "--seed", help="Simulator seed (same seed, same traffic)."),
        keep_running: bool = typer.Option(
            False,
            "--keep-running",
            help="Keep the stack up after the simulation, until Ctrl-C, to explore it.",
        ),
        state_dir: Path | None = typer.Option(
            None,
            "--state-dir",
            help="Where embedded data and logs live (default: MONITOR_STATE_DIR or ./.monitor).",
        ),
        broker_port: int = port_option(9092, "--broker-port", "the embedded broker"),
        pg_port: int = port_option(5433, "--pg-port", "the embedded Postgres"),
        web_port: int = port_option(6066, "--web-port", "the worker's HTTP API"),
        gate_port: int = port_option(6067, "--gate-port", "the gate process"),
        otlp_grpc_port: int = port_option(
            4317, "--otlp-grpc-port", "the worker's OTLP/gRPC receiver"
        ),
    ) -> None:
        """The command; see HELP (shown by --help)."""
        code = run_up(
            Console(),
            settings_dir=state_dir,
            duration=duration,
            rate=rate,
            seed=seed,
            keep_running=keep_running,
            ports=(broker_port, pg_port, web_port, gate_port, otlp_grpc_port),
        )
        raise typer.Exit(code)
