"""Reads and writes of ``drift_references``: each segment's drift state
(:class:`monitor.analytics.drift_policy.Reference`).

``load_references`` returns every stored state keyed by segment; ``save_references`` upserts
states in one transaction (several workers running the same round write the same values, so the
last write wins harmlessly); ``matching`` filters the stored
states by a CLI segment filter.
"""

from __future__ import annotations

from collections.abc import Mapping
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


_SAVE_REFERENCES = text(
    "INSERT INTO drift_references (agent_id, agent_version, domain, tier, ref_from, ref_to,"
    " clean_since, flagged_since, last_recent_to) SELECT * FROM unnest(CAST(:a AS text[]),"
    " CAST(:v AS text[]), CAST(:d AS text[]), CAST(:t AS smallint[]),"
    " CAST(:rf AS timestamptz[]), CAST(:rt AS timestamptz[]), CAST(:cs AS timestamptz[]),"
    " CAST(:fs AS timestamptz[]), CAST(:lr AS timestamptz[]))"
    " ON CONFLICT ON CONSTRAINT pk_drift_references DO UPDATE SET"
    " ref_from = EXCLUDED.ref_from, ref_to = EXCLUDED.ref_to,"
    " clean_since = EXCLUDED.clean_since, flagged_since = EXCLUDED.flagged_since,"
    " last_recent_to = EXCLUDED.last_recent_to, updated_at = now()"
)


async def save_references(engine: AsyncEngine, refs: Mapping[SegmentKey, Reference]) -> None:
    """Upsert the drift states of several segments, in segment order, in one transaction and
    one statement (every column an array)."""
    if not refs:
        return
    ordered = sorted(refs.items())
    params: dict[str, list[Any]] = {
        "a": [k[0] for k, _ in ordered],
        "v": [k[1] for k, _ in ordered],
        "d": [k[2] for k, _ in ordered],
        "t": [k[3] for k, _ in ordered],
        "rf": [r.ref_from for _, r in ordered],
        "rt": [r.ref_to for _, r in ordered],
        "cs": [r.clean_since for _, r in ordered],
        "fs": [r.flagged_since for _, r in ordered],
        "lr": [r.last_recent_to for _, r in ordered],
    }
    async with engine.begin() as conn:
        await conn.execute(_SAVE_REFERENCES, params)


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
