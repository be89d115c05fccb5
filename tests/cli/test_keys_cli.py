"""``monitor keys`` against real Postgres: issue prints the secret once and stores only its
SHA-256, list shows no secret, revoke marks the key (and an unknown id exits 1)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Any

import asyncpg
from typer.testing import CliRunner

from monitor.cli.main import app
from monitor.store.engine import libpq_url


def keys(url: str, *args: str) -> Any:
    return CliRunner().invoke(app, ["keys", *args], env={"MONITOR_DATABASE_URL": url})


def table(url: str) -> list[Any]:
    async def go() -> list[Any]:
        conn = await asyncpg.connect(libpq_url(url))
        try:
            return list(await conn.fetch("SELECT * FROM api_keys ORDER BY created_at"))
        finally:
            await conn.close()

    return asyncio.run(go())


def test_issue_list_revoke(database_url: str) -> None:
    r = keys(
        database_url,
        "issue",
        "--agent",
        "airline-bot",
        "--agent",
        "team-a-*",
        "--scope",
        "write,gate",
        "--scope",
        "read",
        "--name",
        "team a",
        "--expires",
        "90d",
    )
    assert r.exit_code == 0, r.output
    secret = re.search(r"(mk_[A-Za-z0-9_-]{43})", r.output)
    assert secret is not None, r.output
    key_id = re.search(r"key (key_[0-9a-f]{12})", r.output)
    assert key_id is not None
    stored = table(database_url)
    assert len(stored) == 1
    row = stored[0]
    assert row["key_hash"] == hashlib.sha256(secret.group(1).encode()).hexdigest()
    assert secret.group(1) not in json.dumps([str(v) for v in row.values()])  # only the hash
    assert row["agents"] == ["airline-bot", "team-a-*"]
    assert row["scopes"] == ["write", "gate", "read"] and row["name"] == "team a"
    assert row["expires_at"] is not None and row["revoked_at"] is None

    listed = keys(database_url, "list", "--json")
    assert listed.exit_code == 0, listed.output
    (shown,) = json.loads(listed.output)["keys"]
    assert shown["id"] == key_id.group(1) and shown["state"] == "active"
    assert secret.group(1) not in listed.output and row["key_hash"] not in listed.output
    assert key_id.group(1) in keys(database_url, "list").output

    revoked = keys(database_url, "revoke", key_id.group(1))
    assert revoked.exit_code == 0 and "revoked" in revoked.output
    assert table(database_url)[0]["revoked_at"] is not None
    assert json.loads(keys(database_url, "list", "--json").output)["keys"][0]["state"] == "revoked"
    assert keys(database_url, "revoke", "key_nope").exit_code == 1

    bad = keys(database_url, "issue", "--agent", "x", "--scope", "admin")
    assert bad.exit_code == 2 and "scopes must be among" in bad.output
    bad = keys(database_url, "issue", "--agent", "a*b")
    assert bad.exit_code == 2
    assert len(table(database_url)) == 1
