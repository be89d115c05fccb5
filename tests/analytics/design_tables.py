"""An invariant shared by the tests that change items' labels: ``item_hours``,
``design_hours`` (monitor/ingest/design_sql.py) and ``label_hours`` (label_sql.py) equal what
the stored ``items`` give now."""

from __future__ import annotations

from typing import Any

import asyncpg

SEG = "agent_id, agent_version, domain, tier"


async def assert_design_tables_match_items(conn: asyncpg.Connection) -> int:
    """Asserts the invariant; returns how many conversation-hour rows have items (> 0 checked)."""
    want_rows = await conn.fetch(
        f"SELECT conversation_id, date_trunc('hour', ts, 'UTC') AS hour, {SEG}, count(*) AS n"
        " FROM items WHERE label IS NOT NULL AND weight > 0"
        f" GROUP BY conversation_id, hour, {SEG}"
    )
    got_rows = await conn.fetch(f"SELECT conversation_id, hour, {SEG}, n, multi FROM item_hours")
    assert all(r["n"] >= 0 for r in got_rows)
    want = {tuple(r.values()) for r in want_rows}
    got = {tuple(r.values())[:-1] for r in got_rows if r["n"] > 0}
    assert got == want
    rows_of: dict[Any, int] = {}
    for r in got_rows:
        rows_of[r["conversation_id"]] = rows_of.get(r["conversation_id"], 0) + 1
    assert all(r["multi"] == (rows_of[r["conversation_id"]] > 1) for r in got_rows)
    sums = await conn.fetch(
        f"SELECT hour, {SEG}, sum(n) AS items, count(DISTINCT conversation_id) AS conversations"
        f" FROM (SELECT conversation_id, date_trunc('hour', ts, 'UTC') AS hour, {SEG}, 1 AS n"
        "        FROM items WHERE label IS NOT NULL AND weight > 0) AS i"
        f" GROUP BY hour, {SEG}"
    )
    stored = await conn.fetch(
        f"SELECT hour, {SEG}, items, conversations FROM design_hours"
        " WHERE items <> 0 OR conversations <> 0"
    )
    assert {tuple(r.values()) for r in stored} == {tuple(r.values()) for r in sums}
    sources = await conn.fetch(
        f"SELECT date_trunc('hour', ts, 'UTC') AS hour, {SEG}, label_source, count(*)"
        f" FROM items WHERE label IS NOT NULL GROUP BY hour, {SEG}, label_source"
    )
    by_hour = await conn.fetch(
        f"SELECT hour, {SEG}, label_source, items FROM label_hours WHERE items <> 0"
    )
    assert {tuple(r.values()) for r in by_hour} == {tuple(r.values()) for r in sources}
    return len(want)
