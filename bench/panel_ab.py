"""A/B of changed dashboard SQL: each panel whose SQL differs from an earlier commit's, timed
both ways on the same store, with a check that both give the same rows.

For a panel change (a new roll-up, a rewritten query) on a store kept by ``bench/metrics.py
--keep``: the earlier SQL comes from ``git show REV:dashboards/<board>.json``, both are
interpolated as ``bench/metrics.py`` interpolates them (all template values, 24h and 7d ranges
ending at ``--now``), run once to warm up, then ``--repeat`` times each, alternating; prints
the medians, the ratio new / old and whether the rows are equal (compared as sorted lists:
the panels order by time only, so rows of equal time may come in either order; floats are
compared to 1e-9 relative)::

    .venv/bin/python bench/panel_ab.py --reuse postgresql://.../bench_metrics_<id> \\
        --now 2026-11-26T18:02:54+00:00 --old-ref a545618^
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.metrics import RANGES, _panels, template_variables
from tests.dashboards import grafana_sql as g

REPO = Path(__file__).resolve().parent.parent


def queries(board: dict[str, Any], now: datetime) -> dict[tuple[str, str], str]:
    """(range, panel title) -> the first target's SQL as Grafana sends it (all values)."""
    variables = template_variables(board.get("templating", {}).get("list", []))
    out: dict[tuple[str, str], str] = {}
    for label, span in RANGES.items():
        tr = g.TimeRange(now - span, now)
        for p in _panels(board):
            targets = [t for t in p.get("targets", []) if t.get("rawSql")]
            if targets:
                out[(label, str(p.get("title")))] = g.interpolate(
                    targets[0]["rawSql"],
                    time_range=tr,
                    interval_ms=g.panel_interval_ms(p, tr, None),
                    variables=variables,
                )
    return out


def _same(a: list[Any], b: list[Any]) -> bool:
    def close(x: Any, y: Any) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
        return bool(x == y)

    ra, rb = sorted(map(tuple, a), key=repr), sorted(map(tuple, b), key=repr)
    return len(ra) == len(rb) and all(
        len(x) == len(y) and all(close(u, v) for u, v in zip(x, y, strict=True))
        for x, y in zip(ra, rb, strict=True)
    )


async def run(args: argparse.Namespace) -> int:
    now = datetime.fromisoformat(args.now)
    pairs: list[tuple[str, str, str, str]] = []  # (board / title, range, old sql, new sql)
    for path in sorted((REPO / "dashboards").glob("*.json")):
        shown = subprocess.run(
            ["git", "show", f"{args.old_ref}:dashboards/{path.name}"],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if shown.returncode != 0:
            continue  # a board the earlier commit did not have
        old = queries(json.loads(shown.stdout), now)
        new = queries(json.loads(path.read_text()), now)
        pairs += [
            (f"{path.stem} / {k[1]}", k[0], old[k], new[k])
            for k in new
            if k in old and old[k] != new[k]
        ]
    if not pairs:
        print(f"no panel's SQL differs from {args.old_ref}")
        return 0
    conn = await asyncpg.connect(args.reuse)
    try:
        print("| panel | range | old ms | new ms | new / old | same rows |")
        print("| --- | --- | ---: | ---: | ---: | --- |")
        for name, rng, old_sql, new_sql in pairs:
            times: dict[str, list[float]] = {"old": [], "new": []}
            rows = {
                side: await conn.fetch(sql) for side, sql in (("old", old_sql), ("new", new_sql))
            }
            for _ in range(args.repeat):
                for side, sql in (("old", old_sql), ("new", new_sql)):
                    t0 = time.perf_counter()
                    await conn.fetch(sql)
                    times[side].append(time.perf_counter() - t0)
            o, n = (statistics.median(times[s]) * 1000 for s in ("old", "new"))
            print(
                f"| {name} | {rng} | {o:.1f} | {n:.1f} | {n / o:.2f} | "
                f"{'yes' if _same(rows['old'], rows['new']) else '**no**'} |"
            )
    finally:
        await conn.close()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(prog="bench/panel_ab.py", description=__doc__.split("\n")[0])
    p.add_argument(
        "--reuse",
        required=True,
        metavar="URL",
        help="a filled store (bench/metrics.py --keep prints its URL)",
    )
    p.add_argument(
        "--now",
        default=datetime.now().astimezone().isoformat(),
        metavar="ISO",
        help="the ranges end here (where the store's data ends); default: now",
    )
    p.add_argument(
        "--old-ref",
        required=True,
        metavar="REV",
        help="the git revision whose dashboards are the baseline",
    )
    p.add_argument("--repeat", type=int, default=7, help="timed runs of each side (7)")
    return asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
