"""The worker's drift round over all segments at once (set-based reads, checks computed
together, one statement for the checks and one for the states) gives, through Postgres,
exactly the checks and states of the same rounds run one segment at a time."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from monitor.analytics.drift import DriftCheck
from monitor.analytics.drift_state import load_references
from monitor.analytics.periodic import drift_against_references
from monitor.analytics.repo import Segment
from monitor.analytics.reports import drift_windows
from monitor.contract.events import AgentEvent, validate_event
from monitor.sim.traffic import Simulator, default_agents
from monitor.store.engine import make_engine
from tests.seeding import seeded_database

N_CONV = 1800
END = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
START = END - timedelta(seconds=5 * N_CONV)  # 2 h 30 min
CHANGE = START + timedelta(minutes=70)
RECENT = timedelta(minutes=40)
TINY = "tiny-agent"  # a segment with too few items for any test
ROUNDS = [START + timedelta(minutes=m) for m in (60, 90, 120, 150)]


def _tiny() -> Iterator[AgentEvent]:
    for n in range(12):
        cid = f"tiny-{n}"
        at = START + timedelta(minutes=12 * n + 1)
        base = {"schema": "agent-event/v1", "conversation_id": cid, "agent": {"id": TINY}}
        for i, (kind, payload) in enumerate(
            [
                ("message", {"role": "user", "content": "hello"}),
                ("message", {"role": "assistant", "content": "hi", "confidence": 0.5 + n / 30}),
                ("outcome", {"success": n % 3 != 0, "source": "ground_truth"}),
            ]
        ):
            yield validate_event(
                {
                    **base,
                    "event_id": f"{cid}:{i}",
                    "type": kind,
                    "ts": (at + timedelta(seconds=i)).isoformat(),
                    kind: payload,
                }
            )


def _events() -> Iterator[AgentEvent]:
    yield from Simulator(5, START, default_agents(CHANGE, None)).events(N_CONV)
    yield from _tiny()


@pytest.fixture
def seeded(migrated_template_url: str) -> Iterator[str]:
    with seeded_database(migrated_template_url, "mon_db", _events()) as url:
        yield url


_COLUMNS = (
    "n_baseline, n_recent, psi, ks_statistic, ks_pvalue, accuracy_baseline, accuracy_recent,"
    " accuracy_pvalue, ece_baseline, ece_recent, ece_delta, ece_pvalue"
)
_STORED = (
    "SELECT agent_id, agent_version, domain, tier, recent_from, recent_to, baseline_from,"
    f" baseline_to, fired, fired_tests, reason, details, {_COLUMNS} FROM drift_checks"
    " ORDER BY recent_to, agent_id, agent_version, domain, tier"
)


Key = tuple[str, str, str, int]


async def _rounds(url: str, each: list[Key] | None) -> tuple[list[Any], list[Any], list[Any]]:
    """The rounds over all segments at once (``each`` None) or over each of ``each`` in turn:
    per round the checks returned and the states after it; then every stored check."""
    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("DELETE FROM drift_checks"))
            await conn.execute(text("DELETE FROM drift_references"))
        found, states = [], []
        for at in ROUNDS:
            kw: dict[str, Any] = {"alpha": 0.001, "min_samples": 100, "min_reference": 150}
            if each is None:
                out = await drift_against_references(engine, at, RECENT, **kw)
            else:
                out = {}
                for k in each:
                    seg = Segment(agent=k[0], agent_version=k[1], domain=k[2], tier=k[3])
                    out |= await drift_against_references(engine, at, RECENT, segment=seg, **kw)
            found.append(dict(sorted(out.items())))
            states.append(await load_references(engine))
        async with engine.connect() as conn:
            stored = [tuple(r) for r in (await conn.execute(text(_STORED))).all()]
        return found, states, stored
    finally:
        await engine.dispose()


def _same(a: Any, b: Any) -> bool:
    """Equal, floats to 1e-12 relative: Postgres sums a segment's rows in the order it reads
    them, which differs between a query over every segment and one over a single segment, so
    sums of non-integer values (``sum_conf``: the ECEs) may differ in their last bits (the
    per-segment path before the batched one did the same)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, DriftCheck) and isinstance(b, DriftCheck):
        return _same(a.to_dict(), b.to_dict())
    return bool(a == b)


def test_a_batched_round_is_each_segments_round(seeded):
    batched = asyncio.run(_rounds(seeded, None))
    keys = sorted({k for found in batched[0] for k in found})
    assert len(keys) == 5 and any(k[0] == TINY for k in keys)
    each = asyncio.run(_rounds(seeded, keys))
    b_found, b_states, b_stored = batched
    e_found, e_states, e_stored = each
    assert _same(b_found, e_found)  # windows and every field of every check
    assert b_states == e_states  # bit for bit
    assert _same(b_stored, e_stored)
    # what the comparison covers: a segment fired, the tiny one never could, the rest did not
    last = b_found[-1]
    assert any(c.fired for _, c in last.values())
    tiny = [c for k, (_, c) in last.items() if k[0] == TINY]
    assert tiny and not tiny[0].fired and tiny[0].reason.startswith("too few samples")
    assert tiny[0].n_recent > 0
    assert len(b_stored) == sum(len(f) for f in b_found)
    # each check is stored whole, every field once: its columns and its details give it back
    returned = {
        (*key, drift_windows(at, RECENT).recent[1]): check
        for at, found in zip(ROUNDS, b_found, strict=True)
        for key, (_, check) in found.items()
    }
    columns = [c.strip() for c in _COLUMNS.split(",")]
    assert set(columns).isdisjoint(b_stored[0][11]) and "reason" not in b_stored[0][11]
    for row in b_stored:
        key = (*row[:4], row[5])
        stored = DriftCheck(
            **row[11],
            **dict(zip(columns, row[12:], strict=True)),
            fired=row[8],
            fired_tests=tuple(t for t in row[9].split(",") if t),
            reason=row[10],
        )
        assert stored == returned.pop(key)  # bit for bit (a float column holds the double)
    assert not returned
