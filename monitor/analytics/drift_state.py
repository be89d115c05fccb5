"""Reads and writes of ``drift_references``: each segment's drift state
(:class:`monitor.analytics.drift_policy.Reference`).

``load_references`` returns every stored state keyed by segment; ``save_reference`` upserts
one (several workers running the same round write the same values, so the last write wins
harmlessly); ``matching`` filters the stored states by a CLI segment filter.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.drift_policy import Reference
from monitor.analytics.repo import Segment
from monitor.analytics.write import SegmentKey


async def load_references(engine: AsyncEngine) -> dict[SegmentKey, Reference]:
    """Every segment's stored drift state."""
    sql = text(
        "SELECT agent_id, agent_version, domain, tier, ref_from, ref_to, clean_since,"
        " flagged_since, last_recent_to FROM drift_references"
    )
    async with engine.connect() as conn:
        rows: list[Any] = list((await conn.execute(sql)).all())
    return {
        (str(r[0]), str(r[1]), str(r[2]), int(r[3])): Reference(r[4], r[5], r[6], r[7], r[8])
        for r in rows
    }


async def save_reference(engine: AsyncEngine, key: SegmentKey, ref: Reference) -> None:
    """Upsert the drift state of segment ``key``."""
    sql = text(
        "INSERT INTO drift_references (agent_id, agent_version, domain, tier, ref_from, ref_to,"
        " clean_since, flagged_since, last_recent_to) VALUES (:a, :v, :d, :t, :rf, :rt, :cs,"
        " :fs, :lr) ON CONFLICT ON CONSTRAINT pk_drift_references DO UPDATE SET"
        " ref_from = EXCLUDED.ref_from, ref_to = EXCLUDED.ref_to,"
        " clean_since = EXCLUDED.clean_since, flagged_since = EXCLUDED.flagged_since,"
        " last_recent_to = EXCLUDED.last_recent_to, updated_at = now()"
    )
    params = {
        "a": key[0],
        "v": key[1],
        "d": key[2],
        "t": key[3],
        "rf": ref.ref_from,
        "rt": ref.ref_to,
        "cs": ref.clean_since,
        "fs": ref.flagged_since,
        "lr": ref.last_recent_to,
    }
    async with engine.begin() as conn:
        await conn.execute(sql, params)


def matching(states: dict[SegmentKey, Reference], segment: Segment) -> dict[SegmentKey, Reference]:
    """The states whose segment ``segment`` selects (agent wildcards ``*`` and ``?``)."""

    def selected(key: SegmentKey) -> bool:
        return (
            (segment.agent is None or fnmatchcase(key[0], segment.agent))
            and segment.agent_version in (None, key[1])
            and segment.domain in (None, key[2])
            and segment.tier in (None, key[3])
        )

    return {key: ref for key, ref in states.items() if selected(key)}
