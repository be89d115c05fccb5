"""``monitor replay``: send a JSON Lines or tau2-bench results file to the events topic.

Thin CLI over :func:`monitor.replay.send.run_replay`. Exit codes: 0 done (skipped bad lines are
listed but do not fail the run), 1 aborted (``--strict`` bad line, delivery failure) or every
line was invalid, 2 nothing
could start (unreadable/unknown file, no Kafka bootstrap configured, invalid settings).
The helpers here (bootstrap resolution, Kafka sender, progress, summary) are shared with
``monitor simulate``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, TaskID
from rich.table import Table

from monitor.config import load_settings
from monitor.contract.events import EVENT_TYPES
from monitor.core.errors import MonitorError
from monitor.replay.reader import LineError, ReplayItem, open_source
from monitor.replay.send import ReplayReport, SendFn, run_replay
from monitor.stack import endpoints

MAX_ERROR_ROWS = 50


def kafka_target(bootstrap: str | None, topic: str | None) -> tuple[str, str, bool]:
    """``(bootstrap, topic, idempotent)`` from the options, else the settings.

    Raises:
        typer.Exit(2): no bootstrap anywhere, or the MONITOR_* settings are invalid.
    """
    try:
        settings = endpoints.resolve(load_settings())
    except ValidationError as exc:
        fail(f"invalid MONITOR_* settings: {exc}", 2)
    servers = bootstrap or settings.kafka_bootstrap
    if not servers:
        fail(
            "no Kafka broker to send to: pass --bootstrap HOST:PORT, set "
            "MONITOR_KAFKA_BOOTSTRAP, or start the local stack with `monitor up` "
            "(use --dry-run to only validate).",
            2,
        )
    return servers, topic or settings.topic_events, settings.kafka_idempotent


@asynccontextmanager
async def kafka_sender(bootstrap: str, topic: str, idempotent: bool) -> AsyncIterator[SendFn]:
    """An SDK ``EventEmitter`` started for the block; flushed and closed at its end.

    Raises:
        monitor.sdk.EmitterError (a MonitorError): cannot connect, or deliveries failed.
    """
    from monitor.sdk import EventEmitter  # imported lazily: aiokafka is slow to import

    emitter = EventEmitter(bootstrap, topic, idempotent=idempotent)
    await emitter.start()
    try:
        yield emitter.send
        await emitter.flush()
    finally:
        await emitter.close()


def progress_printer(progress: Progress, task: TaskID) -> Callable[[ReplayItem], None]:
    """An ``on_item`` callback: advance the bar; print each bad line as ``path:line: ...``."""

    def on_item(item: ReplayItem) -> None:
        if isinstance(item, LineError):
            progress.console.print(
                f"[red]{escape(item.location)}[/]: {escape(item.reason)}: {escape(item.detail)}",
                soft_wrap=True,
            )
        progress.advance(task)

    return on_item


def print_summary(console: Console, report: ReplayReport, title: str) -> None:
    """Counts per event type (and bad lines), then a table of the bad lines if any."""
    console.print(escape(title), soft_wrap=True)
    table = Table()
    table.add_column("type")
    table.add_column("count", justify="right")
    counts = report.counts.as_dict()
    for name in EVENT_TYPES:
        table.add_row(name, str(counts[name]))
    table.add_row("[bold]events[/]", f"[bold]{report.counts.events}[/]")
    table.add_row("invalid lines", str(report.counts.errors))
    console.print(table)
    if report.errors:
        console.print(f"skipped {len(report.errors)} invalid line(s):", soft_wrap=True)
        errors = Table()
        for column in ("location", "reason", "detail"):
            errors.add_column(column, overflow="fold")
        for err in report.errors[:MAX_ERROR_ROWS]:
            errors.add_row(escape(err.location), escape(err.reason), escape(err.detail))
        if len(report.errors) > MAX_ERROR_ROWS:
            errors.add_row("...", f"{len(report.errors) - MAX_ERROR_ROWS} more", "")
        console.print(errors)


async def replay_items(
    items: Iterable[ReplayItem],
    *,
    total: int | None,
    target: tuple[str, str, bool] | None,
    rate: float | None,
    strict: bool,
    label: str,
) -> ReplayReport:
    """Run the flow under a progress bar, sending to Kafka unless ``target`` is None.

    The bar goes to stderr and only when it is a terminal; bad lines are printed to stderr.
    """
    err = Console(stderr=True)
    with Progress(console=err, disable=not err.is_terminal) as progress:
        task = progress.add_task(label, total=total)
        on_item = progress_printer(progress, task)
        if target is None:
            return await run_replay(items, None, rate=rate, strict=strict, on_item=on_item)
        async with kafka_sender(*target) as send:
            return await run_replay(items, send, rate=rate, strict=strict, on_item=on_item)


def fail(message: str, code: int) -> NoReturn:
    """Print ``error: message`` to stderr and exit with ``code``."""
    Console(stderr=True).print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    @app.command("replay")
    def replay(
        path: Path = typer.Argument(
            ..., help="agent-event/v1 JSON Lines file, or a tau2-bench results JSON file."
        ),
        rate: float | None = typer.Option(
            None, "--rate", min=0.001, help="Send at most this many events per second."
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Validate and count only; no broker needed."
        ),
        strict: bool = typer.Option(
            False, "--strict", help="Abort (exit 1) at the first invalid line."
        ),
        bootstrap: str | None = typer.Option(
            None, "--bootstrap", help="Kafka HOST:PORT (default: MONITOR_KAFKA_BOOTSTRAP)."
        ),
        topic: str | None = typer.Option(
            None, "--topic", help="Events topic (default: MONITOR_TOPIC_EVENTS, agent-events)."
        ),
    ) -> None:
        """Replay a recorded file: validate every event and send it to the events topic.

        Invalid lines are printed as FILE:LINE, skipped and listed at the end (--strict stops
        at the first one). tau2-bench results are converted to agent-event/v1 on the fly.
        """
        try:
            source = open_source(path)
        except MonitorError as exc:
            fail(str(exc), 2)
        target = None if dry_run else kafka_target(bootstrap, topic)
        label = f"{'validating' if dry_run else 'replaying'} {path.name} ({source.format})"
        try:
            report = asyncio.run(
                replay_items(
                    source, total=source.total, target=target, rate=rate, strict=strict, label=label
                )
            )
        except MonitorError as exc:
            fail(f"replay failed: {exc}", 1)
        done = "validated" if target is None else f"sent {report.sent} to {target[1]}@{target[0]}"
        print_summary(Console(), report, f"{path.name}: {done}")
        if report.aborted is not None:
            fail(f"aborted at {report.aborted.location} (--strict)", 1)
        if report.counts.errors and not report.counts.events:
            fail(
                f"{path}: every line ({report.counts.errors}) was invalid; nothing to "
                f"{'send' if target is not None else 'replay'}",
                1,
            )
