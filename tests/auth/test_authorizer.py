"""The authorizer and the worker's key cache, with plain values (no I/O)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest

from monitor.auth.authorizer import Authorizer, Denied, Grant
from monitor.auth.cache import KeyCache
from monitor.auth.keys import (
    ApiKey,
    check_agents,
    hash_secret,
    new_secret,
    parse_scopes,
)
from monitor.core.errors import KeyDefinitionError

NOW = datetime(2026, 6, 1, tzinfo=UTC)
TEAM, SOLO, OLD, GONE = (new_secret() for _ in range(4))
KEYS = {
    hash_secret(TEAM): ApiKey(
        "key_team", "", hash_secret(TEAM), ("team-a-*", "bot"), ("write", "gate", "read")
    ),
    hash_secret(SOLO): ApiKey("key_solo", "", hash_secret(SOLO), ("solo",), ("write",)),
    hash_secret(OLD): ApiKey(
        "key_old", "", hash_secret(OLD), ("*",), ("write",), expires_at=NOW - timedelta(seconds=1)
    ),
    hash_secret(GONE): ApiKey(
        "key_gone", "", hash_secret(GONE), ("*",), ("write",), revoked_at=NOW - timedelta(days=1)
    ),
}
TOKENS: Mapping = {"write": "dev-ingest", "gate": None, "read": "dev-read"}


def auth() -> Authorizer:
    return Authorizer(KEYS, TOKENS, lambda: NOW)


def test_keys_grant_their_agents_and_scopes_only() -> None:
    a = auth()
    grant = a.check(f"bearer {TEAM}", "write")
    assert isinstance(grant, Grant) and grant.key_id == "key_team"
    assert grant.allows("team-a-7") and grant.allows("bot") and not grant.allows("bot2")
    assert not grant.allows("team-b-1")
    assert isinstance(a.check(f"Bearer {TEAM}", "read", ["team-a-1", "bot"]), Grant)
    denied = a.check(f"Bearer {TEAM}", "read", ["team-a-1", "other"])
    assert isinstance(denied, Denied) and (denied.status, denied.reason) == (403, "out_of_scope")
    denied = a.check(f"Bearer {SOLO}", "gate", ["solo"])
    assert isinstance(denied, Denied) and (denied.status, denied.reason) == (403, "missing_scope")
    for header in (
        None,
        "",
        "Bearer",
        f"Basic {TEAM}",
        f"Bearer {OLD}",
        f"Bearer {GONE}",
        "Bearer mk_unknown",
        "Bearer dev-read",
    ):
        d = a.check(header, "write")
        assert isinstance(d, Denied) and (d.status, d.reason) == (401, "unauthorized"), header
        assert TEAM not in d.message
    assert a.check(f"Bearer {GONE}", "write").key_id == "key_gone"  # type: ignore[union-attr]


def test_shared_tokens_are_the_development_mode() -> None:
    a = auth()
    grant = a.check("Bearer dev-ingest", "write", ["anyone"])
    assert isinstance(grant, Grant) and grant.agents is None and grant.allows("x")
    assert isinstance(a.check("Bearer dev-read", "read", ["x"]), Grant)
    assert isinstance(a.check("Bearer dev-ingest", "gate"), Denied)  # gate token unset


def test_key_definitions() -> None:
    assert parse_scopes(["read,write", "gate"]) == ("write", "gate", "read")
    assert check_agents([" a ", "t-*", "a"]) == ("a", "t-*")
    for bad in (["admin"], [""]):
        with pytest.raises(KeyDefinitionError):
            parse_scopes(bad)
    with pytest.raises(KeyDefinitionError):
        check_agents(["a*b"])


async def test_cache_reloads_on_a_miss_bounded_and_keeps_keys_when_the_store_fails() -> None:
    store: dict[str, ApiKey] = {}
    calls = 0
    failing = False
    clock = [0.0]

    async def load() -> Mapping[str, ApiKey]:
        nonlocal calls
        calls += 1
        if failing:
            raise OSError("connection refused")
        return dict(store)

    cache = KeyCache(load, TOKENS, lambda: NOW, lambda: clock[0], miss_interval_s=2.0)
    assert await cache.refresh()
    assert isinstance(await cache.check(f"Bearer {TEAM}", "write"), Denied)  # a miss: reloaded
    assert calls == 2
    store.update(KEYS)
    assert isinstance(await cache.check(f"Bearer {TEAM}", "write"), Denied)  # within 2 s: no reload
    assert calls == 2
    clock[0] = 2.5
    assert isinstance(await cache.check(f"Bearer {TEAM}", "write"), Grant)  # reloaded on the miss
    assert calls == 3
    for _ in range(50):  # unknown keys cannot make it reload more than once per interval
        await cache.check("Bearer mk_random", "write")
    assert calls == 3
    failing = True
    assert not await cache.refresh()
    assert cache.failures == 1
    assert isinstance(await cache.check(f"Bearer {TEAM}", "write"), Grant)  # from the cache
    assert isinstance(await cache.check("Bearer dev-ingest", "write"), Grant)
    await asyncio.sleep(0)
