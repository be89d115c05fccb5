"""The ``api_keys`` table: issue, list, revoke, load (I/O edge: SQLAlchemy).

Only the SHA-256 of a secret is written (:func:`monitor.auth.keys.hash_secret`); the secret is
returned once by :func:`issue` and exists nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from monitor.auth.keys import ApiKey, Scope, hash_secret, new_key_id, new_secret
from monitor.store.tables_auth import api_keys


def _key(row: Any) -> ApiKey:
    return ApiKey(
        id=row.id,
        name=row.name,
        key_hash=row.key_hash,
        agents=tuple(row.agents),
        scopes=ApiKey.scopes_of(row.scopes),
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
    )


async def issue(
    conn: AsyncConnection,
    agents: Sequence[str],
    scopes: Sequence[Scope],
    name: str = "",
    expires_at: datetime | None = None,
) -> tuple[ApiKey, str]:
    """Store a new key; returns it and its secret (shown once: only its hash is stored)."""
    secret = new_secret()
    values = {
        "id": new_key_id(),
        "name": name,
        "key_hash": hash_secret(secret),
        "agents": list(agents),
        "scopes": list(scopes),
        "expires_at": expires_at,
    }
    row = (await conn.execute(api_keys.insert().values(**values).returning(api_keys))).one()
    return _key(row), secret


async def list_keys(conn: AsyncConnection) -> list[ApiKey]:
    """Every key, revoked and expired ones included, oldest first."""
    rows = await conn.execute(select(api_keys).order_by(api_keys.c.created_at, api_keys.c.id))
    return [_key(r) for r in rows]


async def revoke(conn: AsyncConnection, key_id: str, now: datetime) -> ApiKey | None:
    """Revoke ``key_id`` (at ``now``; a revoked key keeps its first revocation time); None
    when no key has that id."""
    await conn.execute(
        update(api_keys)
        .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    row = (await conn.execute(select(api_keys).where(api_keys.c.id == key_id))).one_or_none()
    return None if row is None else _key(row)


async def load_keys(conn: AsyncConnection) -> dict[str, ApiKey]:
    """Every stored key by its secret's hash (what the worker's cache holds)."""
    return {k.key_hash: k for k in await list_keys(conn)}
