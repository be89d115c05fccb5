"""The design effect of a window: labelled items (weight > 0) per conversation, read from the
stored rows (:meth:`monitor.analytics.bins.BinSums.with_design_effect` uses it).

Items share their conversation's label, so ``n`` items of ``m`` conversations carry less
information than ``n`` independent ones; the figure is ``n / m`` (at least 1) per group.
``m`` counts *distinct* conversations, which does not add up over hours, so:

- a window holding at least one whole UTC hour reads the whole hours from ``design_hours``
  (items and conversations per hour and segment) and ``item_hours`` (only the rows flagged
  ``multi``: conversations with items in several hours or segments, each counted once), and the
  parts before the first and after the last whole hour from ``items`` (by ``ix_items_ts``);
  tables kept by the items statement (:mod:`monitor.ingest.design_sql`);
- a shorter window, or any window read with ``scan=True``, reads its ``items`` rows alone (the
  reference the tests and ``bench/metrics.py`` compare the roll-up read with).

Both give the same numbers: a conversation whose items fall into ``k`` groups counts once in
each, and once per group in the ``with_total`` figure (which is its own group when
``group_by`` is empty).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.repo import Segment, whole_hours

_RATIO = "sum(n)::float8 / NULLIF(sum(c), 0)::float8"
_LABELLED = "label IS NOT NULL AND weight > 0"


async def design_effects(
    engine: AsyncEngine,
    segment: Segment,
    start: datetime,
    end: datetime,
    group_by: Sequence[str] = ("agent_id",),
    *,
    with_total: bool = False,
    scan: bool = False,
) -> dict[tuple[Any, ...], float]:
    """Per group, labelled items (weight > 0) per conversation in ``[start, end)`` (>= 1); with
    ``with_total`` also the figure over all groups, under the key ``()``. Groups without
    items are absent.

    Reads the hourly roll-ups when the window holds a whole UTC hour, else the window's
    ``items`` rows (module docstring). ``scan=True`` reads the ``items`` rows alone whatever
    the window: the same numbers, at a cost that grows with the window's items; it is the
    reference the roll-up read is checked against."""
    hours = None if scan else whole_hours(start, end)
    if hours is None:
        return await _scan(engine, segment, start, end, group_by, with_total)
    cond, params = segment.where()
    kc = "".join(f"{k}, " for k in group_by)
    in_hours = f"hour >= :a AND hour < :b AND {cond}"
    edges = f"{_LABELLED} AND (ts >= :lo AND ts < :a OR ts >= :b AND ts < :hi) AND {cond}"
    multi = f"FROM item_hours WHERE multi AND n > 0 AND {in_hours}"
    parts = f"""
      SELECT {kc}items AS n, conversations AS c FROM design_hours WHERE {in_hours}
      UNION ALL SELECT {kc}0, -1 {multi}
      UNION ALL SELECT {kc}count(*), 0 FROM items WHERE {edges}
        {"GROUP BY " + ", ".join(group_by) if group_by else ""}
      UNION ALL SELECT {kc}0, 1 FROM (
        SELECT {kc}conversation_id {multi}
        UNION SELECT {kc}conversation_id FROM items WHERE {edges}) AS d"""
    a, b = hours
    return await _fetch(
        engine,
        _grouped(parts, group_by, with_total, _RATIO),
        group_by,
        {"lo": start, "hi": end, "a": a, "b": b, **params},
    )


async def _scan(
    engine: AsyncEngine,
    segment: Segment,
    start: datetime,
    end: datetime,
    group_by: Sequence[str],
    with_total: bool,
) -> dict[tuple[Any, ...], float]:
    """:func:`design_effects` counted from the window's ``items`` rows alone."""
    cond, params = segment.where()
    kc = "".join(f"{k}, " for k in group_by)
    per_conversation = (
        f"SELECT {kc}conversation_id, count(*) AS n, 1 AS c FROM items"
        f" WHERE {_LABELLED} AND ts >= :lo AND ts < :hi AND {cond}"
        f" GROUP BY {kc}conversation_id"
    )
    return await _fetch(
        engine,
        _grouped(per_conversation, group_by, with_total, _RATIO),
        group_by,
        {"lo": start, "hi": end, **params},
    )


def _grouped(rows: str, group_by: Sequence[str], with_total: bool, value: str) -> str:
    """``SELECT keys, is_total, value`` over ``rows`` per group (and over all with_total)."""
    keys = ", ".join(group_by)
    if not keys:
        return f"SELECT true, {value} FROM ({rows}) AS t"
    if with_total:
        return (
            f"SELECT {keys}, GROUPING({keys}) <> 0, {value} FROM ({rows}) AS t"
            f" GROUP BY GROUPING SETS (({keys}), ())"
        )
    return f"SELECT {keys}, false, {value} FROM ({rows}) AS t GROUP BY {keys}"


async def _fetch(
    engine: AsyncEngine, sql: str, group_by: Sequence[str], params: dict[str, Any]
) -> dict[tuple[Any, ...], float]:
    async with engine.connect() as conn:
        rows: list[Any] = list((await conn.execute(text(sql), params)).all())
    k = len(group_by)
    return {
        () if r[k] else tuple(r[:k]): max(1.0, float(r[k + 1]))
        for r in rows
        if r[k + 1] is not None
    }
