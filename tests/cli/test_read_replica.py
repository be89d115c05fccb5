"""Reads off the primary: a real streaming replica (pg_basebackup -R of a private primary)
serves the analytics commands and ``monitor report`` through MONITOR_DATABASE_READ_URL, even
with the primary down, while writing commands go to the primary only."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import typer
from typer.testing import CliRunner

from monitor.cli import alerts, calibration, drift, escalation, gate, judges, report
from monitor.contract.events import validate_event
from monitor.core.errors import InfraError
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.stack.postgres import EmbeddedPostgres
from monitor.store.engine import ensure_database, libpq_url, make_engine, upgrade, with_database
from monitor.store.replica import ReadSource, read_source
from tests.factories import event_dict

pytestmark = pytest.mark.stack  # starts a primary and a standby of its own


@pytest.fixture
def servers(private_dir: Path) -> Iterator[tuple[EmbeddedPostgres, EmbeddedPostgres]]:
    """A private primary and a hot standby streaming from it (both started)."""
    primary = EmbeddedPostgres(private_dir / "primary", fsync=False)
    try:
        primary.start()
    except InfraError as exc:
        if "binaries not available" in str(exc):
            pytest.skip(f"no PostgreSQL binaries: {exc}")
        raise
    standby = None
    try:
        standby = primary.standby(private_dir / "standby").start()
        yield primary, standby
    finally:
        if standby is not None:
            standby.stop("immediate")
        primary.stop("immediate")


def _cli(primary_url: str, read_url: str | None, *args: str) -> Any:
    app = typer.Typer()
    for module in (alerts, calibration, drift, escalation, gate, judges, report):
        module.register(app)
    env = {
        "MONITOR_DATABASE_URL": primary_url,
        "DATABASE_URL": primary_url,
        "MONITOR_STATE_DIR": "/nonexistent-monitor-state",
    }
    if read_url:
        env["MONITOR_DATABASE_READ_URL"] = read_url
    return CliRunner().invoke(app, list(args), env=env)


def _rows(start: datetime) -> list[Any]:
    rows = []
    for i in range(60):
        conv = f"c{i}"
        at = {"at": 0.0, "context": {"domain": "retail", "tier": 2}}
        events = [
            event_dict(f"{conv}-m", conv, "message", confidence=(i % 10) / 10 + 0.05, **at),
            event_dict(f"{conv}-o", conv, "outcome", success=i % 3 != 0, **at),
        ]
        if i % 4 == 0:
            events.insert(1, event_dict(f"{conv}-e", conv, "escalation", **at))
        for k, d in enumerate(events):
            d["ts"] = (start + timedelta(seconds=i * 30 + k)).isoformat()
            rows.append(event_row(validate_event(d)))
    return rows


async def _write_and_wait_for_replay(primary: str, standby: str, rows: list[Any]) -> None:
    writer = EventWriter(primary)
    try:
        await writer.write(rows)
    finally:
        await writer.close()
    p = await asyncpg.connect(libpq_url(primary))
    s = await asyncpg.connect(libpq_url(standby))
    try:
        target = await p.fetchval("SELECT pg_current_wal_lsn()")
        deadline = time.monotonic() + 60
        while not await s.fetchval("SELECT pg_last_wal_replay_lsn() >= $1", target):
            assert time.monotonic() < deadline, "the standby did not replay the writes"
            await asyncio.sleep(0.1)
    finally:
        await p.close()
        await s.close()


async def _sources(primary: str, standby: str) -> tuple[ReadSource, ReadSource]:
    out = []
    for url in (primary, standby):
        engine = make_engine(url)
        try:
            out.append(await read_source(engine))
        finally:
            await engine.dispose()
    return out[0], out[1]


async def _lag_while_replay_paused(primary: str, standby: str) -> float:
    """The standby's lag while it has received a commit it has not replayed (>= 1 s old)."""
    s = await asyncpg.connect(libpq_url(standby))
    p = await asyncpg.connect(libpq_url(primary))
    try:
        await s.execute("SELECT pg_wal_replay_pause()")
        await asyncio.sleep(1.0)
        await p.execute("CREATE TABLE lag_probe (x int); DROP TABLE lag_probe")
        target = await p.fetchval("SELECT pg_current_wal_lsn()")
        deadline = time.monotonic() + 60
        while not await s.fetchval("SELECT pg_last_wal_receive_lsn() >= $1", target):
            assert time.monotonic() < deadline, "the standby did not receive the write"
            await asyncio.sleep(0.1)
        engine = make_engine(standby)
        try:
            source = await read_source(engine)
        finally:
            await engine.dispose()
        await s.execute("SELECT pg_wal_replay_resume()")
    finally:
        await p.close()
        await s.close()
    assert source.standby and source.lag_s is not None
    return source.lag_s


async def _silences(url: str) -> int:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        return int(await conn.fetchval("SELECT count(*) FROM alert_silences"))
    finally:
        await conn.close()


def test_analytics_and_report_read_the_replica(
    servers: tuple[EmbeddedPostgres, EmbeddedPostgres], tmp_path: Path
) -> None:
    primary_pg, standby_pg = servers
    primary = with_database(primary_pg.admin_url, "monitor")
    standby = with_database(standby_pg.admin_url, "monitor")
    asyncio.run(ensure_database(primary))
    upgrade(primary)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    asyncio.run(_write_and_wait_for_replay(primary, standby, _rows(start)))

    on_primary, on_standby = asyncio.run(_sources(primary, standby))
    assert on_primary == ReadSource(standby=False, lag_s=None) and on_primary.describe() == ""
    assert on_standby.standby
    # 0 once all it received is replayed (WAL without a commit, e.g. a checkpoint's, may be
    # in flight: then the age of the last commit replayed, seconds here)
    assert on_standby.lag_s is not None and 0.0 <= on_standby.lag_s < 60
    assert "behind the primary" in on_standby.describe()
    assert asyncio.run(_lag_while_replay_paused(primary, standby)) >= 1.0

    rng = ["--from", start.isoformat(), "--to", (start + timedelta(hours=2)).isoformat()]
    at = (start + timedelta(hours=1)).isoformat()
    reads = {  # every analytics command that writes nothing
        cmd: [cmd, *rng, "--json"]
        for cmd in ("calibration", "escalation", "thresholds", "passk", "judges", "gate")
    }
    reads["drift"] = ["drift", "--no-store", "--at", at, "--recent", "1h", "--json"]
    direct = {cmd: _cli(primary, None, *args) for cmd, args in reads.items()}
    for cmd, result in direct.items():
        assert result.exit_code == 0, (cmd, result.output)
        assert "replica" not in result.stderr

    # a write with a read URL set goes to the primary (and reaches the standby by replication)
    silenced = _cli(
        primary,
        standby,
        "alerts",
        "silence",
        "agent=x",
        "--for",
        "1h",
        "--reason",
        "maintenance",
        "--by",
        "test",
    )
    assert silenced.exit_code == 0, silenced.output
    assert asyncio.run(_silences(primary)) == 1
    asyncio.run(_write_and_wait_for_replay(primary, standby, []))

    primary_pg.stop("fast")  # from now on only the replica can answer

    for cmd, result in direct.items():
        replica = _cli(primary, standby, *reads[cmd])
        assert replica.exit_code == 0, (cmd, replica.output)
        assert json.loads(replica.stdout) == json.loads(result.stdout), cmd
        assert "read from a replica" in replica.stderr and "behind the primary" in replica.stderr
    figures = json.loads(direct["calibration"].stdout)["agents"]
    assert figures and all(r["count"] > 0 for r in figures.values())  # not an empty store

    out = tmp_path / "rep"
    made = _cli(primary, standby, "report", *rng, "--out", str(out))
    assert made.exit_code == 0, made.output
    page = (out / "report.html").read_text()
    assert "read from a replica" in page and "behind the primary" in page

    listed = _cli(primary, standby, "alerts", "silences", "--json")
    assert listed.exit_code == 0, listed.output
    assert "maintenance" in listed.stdout  # replicated, read from the replica

    # writes never go to the replica: with the primary down they fail, the replica is unchanged
    refused = _cli(
        primary,
        standby,
        "alerts",
        "silence",
        "agent=y",
        "--for",
        "1h",
        "--reason",
        "r",
        "--by",
        "test",
    )
    assert refused.exit_code == 2 and "database unreachable" in refused.output
    assert asyncio.run(_silences(standby)) == 1

    # without a read URL the analytics need the primary
    assert _cli(primary, None, "calibration", *rng, "--json").exit_code == 2
