"""``monitor keys``: issue, list and revoke the scoped API keys (docs/robustness.md, "Threat
model").

``issue`` prints the new key's secret once (only its SHA-256 is stored: it cannot be shown
again); ``list`` shows ids, names, agents, scopes and state, never a secret or hash; ``revoke``
marks a key revoked (workers refuse it from their next reload, at most ``keys_refresh_s``).
Exit codes: 0 done, 1 no key with that id, 2 bad options or no database.
"""

from __future__ import annotations

from datetime import UTC, datetime

import typer
from rich.markup import escape
from rich.table import Table

from monitor.auth import repo
from monitor.auth.keys import ApiKey, check_agents, parse_scopes
from monitor.cli import analytics_common as ac
from monitor.core.errors import KeyDefinitionError


def _state(key: ApiKey, now: datetime) -> str:
    if key.revoked_at is not None:
        return f"revoked {key.revoked_at:%Y-%m-%d %H:%M}"
    if key.expires_at is not None and key.expires_at <= now:
        return f"expired {key.expires_at:%Y-%m-%d %H:%M}"
    return "active"


def key_dict(key: ApiKey, now: datetime) -> dict[str, object]:
    """A key as ``list --json`` shows it (no secret, no hash)."""
    return {
        "id": key.id,
        "name": key.name,
        "agents": list(key.agents),
        "scopes": list(key.scopes),
        "created_at": key.created_at,
        "expires_at": key.expires_at,
        "revoked_at": key.revoked_at,
        "state": _state(key, now).split()[0],
    }


def register(app: typer.Typer) -> None:
    """Add the ``keys`` command group to ``app``."""
    group = typer.Typer(help="API keys: issue, list, revoke (scoped to agents and actions).")
    app.add_typer(group, name="keys")

    @group.command("issue")
    def issue(
        agent: list[str] = typer.Option(
            ..., "--agent", help="An agent id, a 'prefix*' team pattern or '*'; repeat for several."
        ),
        scope: list[str] = typer.Option(
            ["write"], "--scope", help="write, gate, read (comma-separated or repeated)."
        ),
        name: str = typer.Option("", "--name", help="What the key is for (shown by list)."),
        expires: str | None = typer.Option(
            None, "--expires", help="Expiry, ISO 8601 time or a duration from now (90d, 12h)."
        ),
        as_json: bool = ac.JSON,
    ) -> None:
        """Issue a key; prints its secret once (only its hash is stored)."""
        try:
            agents, scopes = check_agents(agent), parse_scopes(scope)
        except KeyDefinitionError as exc:
            raise typer.BadParameter(str(exc)) from None
        now = datetime.now(UTC)
        expires_at = None
        if expires:
            if expires[:1].isdigit() and expires[-1:] in "smhdw":
                expires_at = now + ac.duration(expires, "--expires")
            else:
                expires_at = ac.when(expires, "--expires")

        async def go(eng: ac.AsyncEngine) -> tuple[ApiKey, str]:
            async with eng.begin() as conn:
                return await repo.issue(conn, agents, scopes, name, expires_at)

        key, secret = ac.run_with_engine(ac.console(), go)
        if as_json:
            ac.print_json({**key_dict(key, now), "secret": secret})
            return
        typer.echo(f"key {key.id} for {', '.join(agents)}: {', '.join(scopes)}")
        typer.echo(f"secret (shown once, send it as 'Authorization: Bearer ...'): {secret}")

    @group.command("list")
    def list_(as_json: bool = ac.JSON) -> None:
        """Every key: id, name, agents, scopes, state (no secrets)."""
        now = datetime.now(UTC)

        async def go(eng: ac.AsyncEngine) -> list[ApiKey]:
            async with eng.connect() as conn:
                return await repo.list_keys(conn)

        keys = ac.run_with_engine(ac.console(), go)
        if as_json:
            ac.print_json({"keys": [key_dict(k, now) for k in keys]})
            return
        if not keys:
            typer.echo("no keys")
            return
        table = Table("id", "name", "agents", "scopes", "created", "expires", "state")
        for k in keys:
            table.add_row(
                k.id,
                escape(k.name),
                escape(", ".join(k.agents)),
                ", ".join(k.scopes),
                f"{k.created_at:%Y-%m-%d %H:%M}" if k.created_at else "",
                f"{k.expires_at:%Y-%m-%d %H:%M}" if k.expires_at else "never",
                _state(k, now),
            )
        ac.console().print(table)

    @group.command("revoke")
    def revoke(key_id: str = typer.Argument(..., help="The key id (from list).")) -> None:
        """Revoke a key: workers refuse it from their next reload of the keys."""
        now = datetime.now(UTC)

        async def go(eng: ac.AsyncEngine) -> ApiKey | None:
            async with eng.begin() as conn:
                return await repo.revoke(conn, key_id, now)

        key = ac.run_with_engine(ac.console(), go)
        if key is None:
            typer.echo(f"no key {key_id!r}", err=True)
            raise typer.Exit(1)
        assert key.revoked_at is not None
        typer.echo(f"key {key.id} revoked at {key.revoked_at.isoformat()}")
