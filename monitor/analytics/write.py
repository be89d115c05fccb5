"""Writes and reads of the analytics results: recalibration maps and drift checks.

``save_map`` adds a new version per (agent, domain) (versions count from 1; two writers racing
for the same version fail one of them on the unique key rather than overwrite). ``save_drift``
upserts on (segment, windows): re-running a check for the same windows replaces its row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.drift import DriftCheck
from monitor.analytics.recalibration import MAP_METHOD, IsotonicMap, RecalibrationResult
from monitor.analytics.repo import Segment

SegmentKey = tuple[str, str, str, int]  # agent_id, agent_version, domain, tier


@dataclass(frozen=True)
class StoredMap:
    """A stored recalibration map and its held-out evaluation."""

    agent_id: str
    domain: str
    version: int
    method: str
    map: IsotonicMap
    n_train: int
    n_holdout: int
    ece_before: float | None
    ece_after: float | None
    brier_before: float | None
    brier_after: float | None
    fitted_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (what ``GET /v1/calibration/{agent_id}`` returns per map)."""
        out = {k: v for k, v in self.__dict__.items() if k != "map"}
        out["fitted_at"] = self.fitted_at.isoformat()
        out["map"] = self.map.to_dict()
        return out


async def save_map(
    engine: AsyncEngine,
    agent_id: str,
    domain: str,
    result: RecalibrationResult,
    data_from: datetime,
    data_to: datetime,
) -> int:
    """Store ``result`` as the next version of (agent, domain); returns the version."""
    sql = text(
        "INSERT INTO calibration_maps (agent_id, domain, version, method, map, n_train,"
        " n_holdout, ece_before, ece_after, brier_before, brier_after, data_from, data_to)"
        " SELECT :agent, :domain, coalesce(max(version), 0) + 1, :method, CAST(:map AS jsonb),"
        " :n_train, :n_holdout, :eb, :ea, :bb, :ba, :lo, :hi"
        " FROM calibration_maps WHERE agent_id = :agent AND domain = :domain RETURNING version"
    )
    params = {
        "agent": agent_id,
        "domain": domain,
        "method": MAP_METHOD,
        "map": json.dumps(result.map.to_dict()),
        "n_train": result.n_train,
        "n_holdout": result.n_holdout,
        "eb": _finite(result.ece_before),
        "ea": _finite(result.ece_after),
        "bb": _finite(result.brier_before),
        "ba": _finite(result.brier_after),
        "lo": data_from,
        "hi": data_to,
    }
    async with engine.begin() as conn:
        return int((await conn.execute(sql, params)).scalar_one())


async def current_maps(engine: AsyncEngine, agent_id: str) -> list[StoredMap]:
    """The latest map of each domain of ``agent_id`` (``domain`` ``""`` = all domains)."""
    sql = text(
        f"SELECT DISTINCT ON (domain) {', '.join(f.name for f in fields(StoredMap))}"
        " FROM calibration_maps WHERE agent_id = :agent ORDER BY domain, version DESC"
    )
    async with engine.connect() as conn:
        rows: list[Any] = list((await conn.execute(sql, {"agent": agent_id})).all())
    return [StoredMap(**{**r._mapping, "map": IsotonicMap.from_dict(r.map)}) for r in rows]


def _finite(x: float | None) -> float | None:
    return None if x is None or x != x or x in (float("inf"), float("-inf")) else float(x)


_DRIFT_COLS = (
    "n_baseline",
    "n_recent",
    "psi",
    "ks_statistic",
    "ks_pvalue",
    "accuracy_baseline",
    "accuracy_recent",
    "accuracy_pvalue",
    "ece_baseline",
    "ece_recent",
    "ece_delta",
    "ece_pvalue",
    "fired",
)


async def save_drift(
    engine: AsyncEngine,
    key: SegmentKey,
    baseline: tuple[datetime, datetime],
    recent: tuple[datetime, datetime],
    check: DriftCheck,
) -> None:
    """Upsert one drift check of segment ``key`` for these windows."""
    cols = ", ".join(_DRIFT_COLS)
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in (*_DRIFT_COLS, "fired_tests", "reason"))
    sql = text(
        "INSERT INTO drift_checks (agent_id, agent_version, domain, tier, baseline_from,"
        f" baseline_to, recent_from, recent_to, {cols}, fired_tests, reason, details)"
        " VALUES (:agent_id, :agent_version, :domain, :tier, :bf, :bt, :rf, :rt,"
        f" {', '.join(':' + c for c in _DRIFT_COLS)}, :fired_tests, :reason,"
        " CAST(:details AS jsonb))"
        " ON CONFLICT ON CONSTRAINT uq_drift_checks_segment_windows DO UPDATE SET"
        f" {sets}, details = EXCLUDED.details, checked_at = now()"
    )
    d = check.to_dict()
    params: dict[str, Any] = {c: _finite(d[c]) if c != "fired" else d[c] for c in _DRIFT_COLS}
    params.update(
        n_baseline=check.n_baseline,
        n_recent=check.n_recent,
        agent_id=key[0],
        agent_version=key[1],
        domain=key[2],
        tier=key[3],
        bf=baseline[0],
        bt=baseline[1],
        rf=recent[0],
        rt=recent[1],
        fired_tests=",".join(check.fired_tests),
        reason=check.reason,
        details=json.dumps(d, default=str),
    )
    async with engine.begin() as conn:
        await conn.execute(sql, params)


async def drift_history(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """Stored drift checks whose recent window ends in ``[start, end)``, oldest first."""
    cond, params = segment.where()
    sql = text(
        "SELECT agent_id, agent_version, domain, tier, recent_from, recent_to, baseline_from,"
        f" baseline_to, {', '.join(_DRIFT_COLS)}, fired_tests, reason FROM drift_checks"
        f" WHERE recent_to >= :lo AND recent_to < :hi AND {cond} ORDER BY recent_to, agent_id"
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(sql, {"lo": start, "hi": end, **params})).mappings().all()
    return [dict(r) for r in rows]
