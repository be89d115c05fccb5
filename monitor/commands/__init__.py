"""CLI command modules. Each module defines ``register(app: typer.Typer) -> None``."""
