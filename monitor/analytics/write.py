"""Writes and reads of the analytics results: recalibration maps and drift checks.

``save_map`` adds a new version per (agent, domain) (versions count from 1; two writers racing
for the same version fail one of them on the unique key rather than overwrite). ``save_drifts``
upserts drift checks on (segment, windows), in one transaction: re-running a check for the same
windows replaces its row. A stored check is its columns (sizes, statistics, p-values, ``fired``,
``fired_tests``, ``reason``) and ``details``, a JSON object of the other fields of
:class:`~monitor.analytics.drift.DriftCheck` (:data:`DETAIL_FIELDS`: effective sizes,
weights, PSI level and p-value, accuracy z, surprise log e-value, the settings); rows written
before also repeat the columns' fields in ``details``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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


#: one stored drift check: (segment, baseline window, recent window, check)
StoredCheck = tuple[SegmentKey, tuple[datetime, datetime], tuple[datetime, datetime], DriftCheck]

#: the stored columns of a drift check with their SQL types, in the order of
#: :func:`_drift_row`
_DRIFT_TYPES: tuple[tuple[str, str], ...] = (
    ("agent_id", "text"),
    ("agent_version", "text"),
    ("domain", "text"),
    ("tier", "smallint"),
    ("baseline_from", "timestamptz"),
    ("baseline_to", "timestamptz"),
    ("recent_from", "timestamptz"),
    ("recent_to", "timestamptz"),
    *(
        (c, "int" if c.startswith("n_") else "bool" if c == "fired" else "float8")
        for c in _DRIFT_COLS
    ),
    ("fired_tests", "text"),
    ("reason", "text"),
    ("details", "jsonb"),
)
_NAMES = ", ".join(name for name, _ in _DRIFT_TYPES)

# every check of a round in one statement: each column one array (one row per segment); the
# details travel as text (an array of jsonb would be encoded value by value)
_SAVE_DRIFTS = text(
    f"INSERT INTO drift_checks ({_NAMES}) SELECT "
    + ", ".join(f"{n}::jsonb" if t == "jsonb" else n for n, t in _DRIFT_TYPES)
    + " FROM unnest("
    + ", ".join(
        f"CAST(:c{i} AS {'text' if t == 'jsonb' else t}[])" for i, (_, t) in enumerate(_DRIFT_TYPES)
    )
    + f") AS u({_NAMES})"
    " ON CONFLICT ON CONSTRAINT uq_drift_checks_segment_windows DO UPDATE SET"
    f" {', '.join(f'{c} = EXCLUDED.{c}' for c in (*_DRIFT_COLS, 'fired_tests', 'reason'))},"
    " details = EXCLUDED.details, checked_at = now()"
)


# ``json.dumps(d, default=str)`` builds an encoder per call; a round encodes thousands
_DETAILS_JSON = json.JSONEncoder(default=str).encode

#: the fields of a check in ``details``: those without a column of their own (each stored
#: once: the text a round sends and Postgres parses is less than half of the whole check's)
DETAIL_FIELDS = tuple(
    f.name for f in fields(DriftCheck) if f.name not in {*_DRIFT_COLS, "fired_tests", "reason"}
)
_EXACT = frozenset({"fired", "n_baseline", "n_recent"})  # stored as they are, not as floats


def _drift_row(stored: StoredCheck) -> tuple[Any, ...]:
    key, baseline, recent, check = stored
    return (
        *key,
        *baseline,
        *recent,
        *(getattr(check, c) if c in _EXACT else _finite(getattr(check, c)) for c in _DRIFT_COLS),
        ",".join(check.fired_tests),
        check.reason,
        _DETAILS_JSON({f: getattr(check, f) for f in DETAIL_FIELDS}),
    )


async def save_drifts(engine: AsyncEngine, checks: Sequence[StoredCheck]) -> None:
    """Upsert drift checks, each on its (segment, windows), in segment order, in one transaction
    and one statement (every column an array): a round over thousands of segments is one
    statement and one commit, not one of each per segment."""
    if not checks:
        return
    rows = [_drift_row(c) for c in sorted(checks, key=lambda c: c[0])]
    params = {f"c{i}": list(col) for i, col in enumerate(zip(*rows, strict=True))}
    async with engine.begin() as conn:
        await conn.execute(_SAVE_DRIFTS, params)


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
