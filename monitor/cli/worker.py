"""``monitor worker`` and ``monitor migrate``: run the stream worker; manage the schema."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import typer
from rich.console import Console
from rich.markup import escape

from monitor.config import Settings, load_settings
from monitor.core.errors import ConfigError
from monitor.core.log_redaction import install_log_redaction
from monitor.stack import endpoints

err = Console(stderr=True)


def run_process(run: Callable[[Settings], None], loglevel: str) -> None:
    """Run a long-lived process (the worker, the gate) as ``run(settings)``, logging at
    ``loglevel``, on the configured broker and database or a running ``monitor up``'s. Every
    line it logs is redacted first (:func:`install_log_redaction`: the servers' lines can quote
    a request). Exits with 2 when neither is configured or the configuration is invalid."""
    settings = endpoints.resolve(load_settings())
    if not settings.kafka_bootstrap or not settings.database_url:
        err.print(
            "[red]no broker or database configured[/]: set MONITOR_KAFKA_BOOTSTRAP and "
            "DATABASE_URL, or run `monitor up` for the embedded stack."
        )
        raise typer.Exit(2)
    install_log_redaction()
    logging.basicConfig(
        level=loglevel.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        run(settings)
    except ConfigError as exc:
        err.print(f"[red]invalid configuration[/]:\n{escape(str(exc))}")
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    @app.command("worker")
    def worker(
        loglevel: str = typer.Option("info", help="Log level: debug, info, warning, error."),
    ) -> None:
        """Run the stream worker: Kafka ingest into Postgres, judges, drift checks, alert
        evaluation and delivery, HTTP ingest, /v1/calibration, /metrics, /health.

        Needs MONITOR_KAFKA_BOOTSTRAP and DATABASE_URL (or a running `monitor up`). Stops
        cleanly on Ctrl-C / SIGTERM: the batch in flight is written or left uncommitted. A bad
        sampling or rules file stops it at once with the file, line and field (exit 2).
        """

        def run(settings: Settings) -> None:
            from monitor.worker.app import run_worker

            run_worker(settings, loglevel)

        run_process(run, loglevel)

    @app.command("migrate")
    def migrate(
        revision: str = typer.Argument("head", help="Target revision (head, base, or an id)."),
        down: bool = typer.Option(False, "--down", help="Downgrade to REVISION instead."),
    ) -> None:
        """Create or upgrade the database schema (Alembic); creates the database if missing."""
        settings = endpoints.resolve(load_settings())
        if not settings.database_url:
            err.print("[red]no database configured[/]: set DATABASE_URL or MONITOR_DATABASE_URL.")
            raise typer.Exit(2)
        from monitor.store import engine

        url = settings.database_url
        asyncio.run(engine.wait_for_database(engine.with_database(url, "postgres"), 60))
        asyncio.run(engine.ensure_database(url))
        if down:
            engine.downgrade(url, revision)
        else:
            engine.upgrade(url, revision)
        typer.echo(f"database at {'base' if down and revision == 'base' else revision}")
