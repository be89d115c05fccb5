"""``monitor schema``: print or write the JSON Schema of agent-event/v1."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from monitor.contract.events import json_schema


def render_schema() -> str:
    """The schema as committed in docs/ (sorted keys, 2-space indent, trailing newline)."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def register(app: typer.Typer) -> None:
    @app.command("schema")
    def schema(
        output: Path | None = typer.Option(
            None, "--output", "-o", help="Write to this file instead of standard output."
        ),
    ) -> None:
        """Print the JSON Schema of the agent-event/v1 contract (generated from the models)."""
        text = render_schema()
        if output is None:
            typer.echo(text, nl=False)
        else:
            output.write_text(text)
            typer.echo(f"wrote {output}")
