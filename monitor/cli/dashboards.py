"""``monitor dashboards push``: upload the Grafana dashboards to a running Grafana.

URL, token and folder come from the settings (``MONITOR_GRAFANA_URL``, ``MONITOR_GRAFANA_TOKEN``,
``MONITOR_GRAFANA_FOLDER``); options override them. Exit codes: 0 pushed, 1 Grafana refused or
is unreachable (the message says why; 401 names the token setting), 2 bad options or files.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from monitor.config import load_settings
from monitor.core.errors import ConfigError, GrafanaPushError
from monitor.dashboards import push as gp


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Grafana dashboards: upload them to a running Grafana.", no_args_is_help=True
    )
    app.add_typer(group, name="dashboards")

    @group.command("push")
    def push(
        url: str | None = typer.Option(
            None, "--url", help="Grafana base URL (default: MONITOR_GRAFANA_URL)."
        ),
        folder: str | None = typer.Option(
            None, "--folder", help="Folder title (default: MONITOR_GRAFANA_FOLDER)."
        ),
        directory: Path = typer.Option(
            gp.DEFAULT_DIR, "--dir", help="Directory of the dashboard JSON files."
        ),
    ) -> None:
        """Upload every dashboard (overwrite by uid) into the folder, creating it if missing.
        Running it again updates the same dashboards; it never duplicates them."""
        console = Console()
        settings = load_settings()
        try:
            dashboards = gp.load_dashboards(directory)
        except ConfigError as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(2) from None
        base = url or settings.grafana_url
        title = folder or settings.grafana_folder
        try:
            result = gp.push(gp.client(base, settings.grafana_token), dashboards, title)
        except GrafanaPushError as exc:
            console.print(f"[red]dashboards push failed[/]: {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(1) from None
        verb = "created" if result.folder_created else "found"
        console.print(f"folder {title!r} ({result.folder_uid}) {verb}")
        for uid, path, version in result.dashboards:
            console.print(f"  {uid}: {base.rstrip('/')}{path} (version {version})")
