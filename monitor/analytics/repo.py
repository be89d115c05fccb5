"""Read-side queries of the analytics: stored rows -> the values the pure analytics modules take.

Every function takes an ``AsyncEngine``, a :class:`Segment` filter and a half-open time range
``[start, end)`` (aware datetimes), opens one short connection, and returns plain values.

Time ranges over ``calibration_bins`` are exact sums of rows: the range, widened to whole
minutes when a bound is not on one (:func:`bin_range`), is read as whole days, whole hours and
the minutes at its edges (:func:`bin_pieces`). Item and conversation queries filter on the
item's ``ts`` and the conversation's ``first_ts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.bins import BinSums, FloatArray
from monitor.analytics.passk import Trial

_MINUTE = timedelta(minutes=1)
_HOUR = timedelta(hours=1)
_DAY = timedelta(days=1)


@dataclass(frozen=True)
class Segment:
    """A filter on the segment columns. ``None`` = any; ``agent`` accepts ``*`` and ``?``
    wildcards. ``tier`` 0 and ``domain``/``agent_version`` ``""`` mean "not given by the agent"
    (the sentinels the analytics tables store)."""

    agent: str | None = None
    agent_version: str | None = None
    domain: str | None = None
    tier: int | None = None

    def where(self, prefix: str = "") -> tuple[str, dict[str, Any]]:
        """``(sql condition, bind params)`` for tables with the analytics segment columns."""
        conds, params = ["TRUE"], {}
        if self.agent is not None:
            pattern = self.agent.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            conds.append(f"{prefix}agent_id LIKE :agent")
            params["agent"] = pattern.replace("*", "%").replace("?", "_")
        for col in ("agent_version", "domain", "tier"):
            value = getattr(self, col)
            if value is not None:
                conds.append(f"{prefix}{col} = :{col}")
                params[col] = value
        return " AND ".join(conds), params

    def where_conversations(self) -> tuple[str, dict[str, Any]]:
        """The same filter on ``conversations`` (NULL segment columns there, not sentinels)."""
        cond, params = Segment(self.agent).where()
        if self.agent_version is not None:
            cond += " AND coalesce(agent_version, '') = :agent_version"
            params["agent_version"] = self.agent_version
        if self.domain is not None:
            cond += " AND coalesce(domain, '') = :domain"
            params["domain"] = self.domain
        if self.tier is not None:
            cond += " AND coalesce(tier, 0) = :tier"
            params["tier"] = self.tier
        return cond, params


def bin_range(start: datetime, end: datetime) -> tuple[str, datetime, datetime]:
    """``(resolution, start, end)`` covering ``[start, end)`` exactly with stored windows."""
    if end <= start:
        raise ValueError("end must be after start")
    for res, step in (("1d", timedelta(days=1)), ("1h", timedelta(hours=1))):
        if _aligned(start, step) and _aligned(end, step):
            return res, start, end
    lo = _floor(start, _MINUTE)
    hi = end if _aligned(end, _MINUTE) else _floor(end, _MINUTE) + _MINUTE
    return "1m", lo, hi


def bin_pieces(start: datetime, end: datetime) -> list[tuple[str, datetime, datetime]]:
    """``(resolution, lo, hi)`` pieces covering the same windows as :func:`bin_range` with the
    coarsest stored ones: whole UTC days in the middle, whole hours around them, minutes only
    at the edges (a 7-day range: about 120 minutes, 46 hours and 6 days instead of 10,080
    minutes). The sums are the same (every resolution holds the same items), and a range
    longer than the minute sums' retention still counts the days and hours those keep."""
    res, lo, hi = bin_range(start, end)
    lo, hi = lo.astimezone(UTC), hi.astimezone(UTC)  # the stored hours and days are UTC's
    out: list[tuple[str, datetime, datetime]] = []
    h_lo, h_hi = _ceil(lo, _HOUR), _floor(hi, _HOUR)
    if h_lo >= h_hi:
        return [(res, lo, hi)]
    d_lo, d_hi = _ceil(lo, _DAY), _floor(hi, _DAY)
    middle = (
        [("1h", h_lo, d_lo), ("1d", d_lo, d_hi), ("1h", d_hi, h_hi)]
        if d_lo < d_hi
        else [("1h", h_lo, h_hi)]
    )
    for piece in [("1m", lo, h_lo), *middle, ("1m", h_hi, hi)]:
        if piece[1] < piece[2]:
            out.append(piece)
    return out


def whole_hours(start: datetime, end: datetime) -> tuple[datetime, datetime] | None:
    """``[a, b)``: the whole UTC hours inside ``[start, end)``, or ``None`` if there are none
    (the part of a window the hourly roll-ups of items can answer)."""
    a, b = _ceil(start.astimezone(UTC), _HOUR), _floor(end.astimezone(UTC), _HOUR)
    return (a, b) if a < b else None


def _ceil(t: datetime, step: timedelta) -> datetime:
    f = _floor(t, step)
    return f if f == t else f + step


def _floor(t: datetime, step: timedelta) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=t.tzinfo)
    return epoch + ((t - epoch) // step) * step


def _aligned(t: datetime, step: timedelta) -> bool:
    return _floor(t, step) == t


# sum(count)::bigint: a bigint sum is numeric, which the driver returns as a Decimal per value
_SUM_COLS = (
    "bin, sum(weight), sum(sum_conf), sum(sum_y), sum(sum_sq_err), sum(sum_w2), sum(count)::bigint"
)


async def bin_sums(
    engine: AsyncEngine,
    segment: Segment,
    start: datetime,
    end: datetime,
    group_by: Sequence[str] = ("agent_id",),
    *,
    ordered: bool = True,
) -> dict[tuple[Any, ...], BinSums]:
    """Summed bins per group (segment columns of ``group_by``); groups without rows absent.
    ``ordered``: the groups in key order (the store's collation); ``False`` leaves them in the
    order the store returns them, saving the sort of every (group, bin) row (a drift round
    over thousands of segments looks its groups up by key)."""
    rows = await bin_sum_rows(engine, segment, start, end, group_by, ordered=ordered)
    return BinSums.grouped(rows, len(group_by))


async def bin_sum_rows(
    engine: AsyncEngine,
    segment: Segment,
    start: datetime,
    end: datetime,
    group_by: Sequence[str] = ("agent_id",),
    *,
    ordered: bool = True,
) -> Sequence[Sequence[Any]]:
    """The rows :func:`bin_sums` sums, ``(*group_by, bin, weight, sum_conf, sum_y,
    sum_sq_err, sum_w2, count)``, one per (group, bin), for
    :meth:`~monitor.analytics.bins.BinSums.grouped` (a caller that applies design effects
    while grouping)."""
    bad = set(group_by) - {"agent_id", "agent_version", "domain", "tier"}
    if bad:
        raise ValueError(f"cannot group by {sorted(bad)}")
    cond, params = segment.where()
    pieces = bin_pieces(start, end)
    windows = " OR ".join(
        f"(resolution = :res{i} AND window_start >= :lo{i} AND window_start < :hi{i})"
        for i in range(len(pieces))
    )
    for i, (res, lo, hi) in enumerate(pieces):
        params = {**params, f"res{i}": res, f"lo{i}": lo, f"hi{i}": hi}
    keys = ", ".join(group_by)
    sql = (
        f"SELECT {keys + ', ' if keys else ''}{_SUM_COLS} FROM calibration_bins "
        f"WHERE ({windows}) AND {cond} "
        f"GROUP BY {keys + ', ' if keys else ''}bin"
        + (f" ORDER BY {keys + ', ' if keys else ''}bin" if ordered else "")
    )
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).all()


async def bin_series(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime, resolution: str
) -> dict[tuple[str, datetime], BinSums]:
    """Per (agent, window start) sums at ``resolution`` (``1m``/``1h``/``1d``): a time series."""
    cond, params = segment.where()
    sql = (
        f"SELECT agent_id, window_start, {_SUM_COLS} FROM calibration_bins "
        f"WHERE resolution = :res AND window_start >= :lo AND window_start < :hi AND {cond} "
        "GROUP BY agent_id, window_start, bin ORDER BY agent_id, window_start, bin"
    )
    async with engine.connect() as conn:
        rows = (
            await conn.execute(text(sql), {"res": resolution, "lo": start, "hi": end, **params})
        ).all()
    out: dict[tuple[str, datetime], list[tuple[Any, ...]]] = {}
    for row in rows:
        out.setdefault((row[0], row[1]), []).append(tuple(row[2:]))
    return {key: BinSums.from_rows(r) for key, r in out.items()}


async def labelled_items(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``(confidence, label, weight)`` of the labelled items with weight > 0, by ts then id."""
    cond, params = segment.where()
    sql = (
        "SELECT confidence, label, weight FROM items WHERE label IS NOT NULL AND weight > 0 "
        f"AND ts >= :lo AND ts < :hi AND {cond} ORDER BY ts, event_id"
    )
    async with engine.connect() as conn:
        rows: list[Any] = list(
            (await conn.execute(text(sql), {"lo": start, "hi": end, **params})).all()
        )
    arr = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
    return arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy()


async def trials(
    engine: AsyncEngine,
    segment: Segment,
    start: datetime | None = None,
    end: datetime | None = None,
) -> dict[str, list[Trial]]:
    """Per agent, ``(task_id, outcome)`` of conversations with a task id and an outcome,
    started (``first_ts``) in ``[start, end)`` when given (else every one stored)."""
    cond, params = segment.where_conversations()
    if start is not None:
        cond += " AND first_ts >= :lo"
        params = {**params, "lo": start}
    if end is not None:
        cond += " AND first_ts < :hi"
        params = {**params, "hi": end}
    sql = (
        "SELECT agent_id, task_id, coalesce(outcome_reward,"
        " CASE WHEN outcome_success THEN 1.0 ELSE 0.0 END) FROM conversations"
        f" WHERE task_id IS NOT NULL AND outcome_success IS NOT NULL AND {cond}"
        " ORDER BY agent_id, task_id, trial, conversation_id"
    )
    async with engine.connect() as conn:
        rows: list[Any] = list((await conn.execute(text(sql), params)).all())
    out: dict[str, list[Trial]] = {}
    for agent, task, reward in rows:
        out.setdefault(agent, []).append((task, float(reward)))
    return out
