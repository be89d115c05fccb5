"""Which server a read went to: the primary, or a streaming replica and how far it is behind.

A standby's lag is ``now() - pg_last_xact_replay_timestamp()`` while it still has received WAL
to replay, and zero once everything it received is replayed: on an idle primary the last
replayed commit only gets older, which is not lag. The figure does not see WAL the standby has
not received yet (a cut connection to the primary shows as the age of the last commit once the
standby catches up with what it has).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

READ_SOURCE = text(
    "SELECT pg_is_in_recovery(), CASE WHEN NOT pg_is_in_recovery() THEN NULL "
    "WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0.0 "
    "ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END"
)


@dataclass(frozen=True)
class ReadSource:
    """``standby``: the server is a replica in recovery; ``lag_s``: its replay lag in seconds
    (None on a primary, or on a standby that has replayed no commit yet)."""

    standby: bool
    lag_s: float | None = None

    def describe(self) -> str:
        """One line for a command's header or the report (empty on a primary)."""
        if not self.standby:
            return ""
        if self.lag_s is None:
            return "read from a replica (replay lag unknown: no commit replayed yet)"
        return f"read from a replica {max(self.lag_s, 0.0):.1f} s behind the primary"


async def read_source(engine: AsyncEngine) -> ReadSource:
    """Ask the server ``engine`` reads from whether it is a standby, and its replay lag."""
    async with engine.connect() as conn:
        row = (await conn.execute(READ_SOURCE)).one()
    standby: bool = row[0]
    lag: float | None = row[1]
    return ReadSource(bool(standby), None if lag is None else float(lag))
