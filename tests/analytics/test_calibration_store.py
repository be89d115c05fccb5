"""items and calibration_bins maintained by the ingest transaction, against real Postgres.

The stored sums are compared with BinSums computed directly from the raw (confidence, label,
weight) values the test generated, at every resolution.
"""

from __future__ import annotations

import random

import asyncpg
import numpy as np
import pytest

from monitor.analytics.bins import BinSums
from monitor.analytics.calibration import brier, ece
from monitor.contract.events import AgentEvent
from monitor.ingest.items_sql import bin_sql
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.sampling.policy import SamplingPolicy, hash_unit
from monitor.store.engine import libpq_url
from tests.analytics.design_tables import assert_design_tables_match_items
from tests.db import fetch
from tests.factories import event

SUMS = "bin, weight, sum_conf, sum_y, sum_sq_err, sum_w2, count"


async def stored(database_url: str, resolution: str, agent: str = "agent-a") -> BinSums:
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        rows = await conn.fetch(
            f"SELECT {SUMS} FROM calibration_bins WHERE resolution = $1 AND agent_id = $2",
            resolution,
            agent,
        )
        return BinSums.from_rows([tuple(r) for r in rows])
    finally:
        await conn.close()


def build(n_conv: int, seed: int, with_outcome: bool = True) -> tuple[list[AgentEvent], dict]:
    """Conversations spread over ~3 hours; returns events and {cid: (confs, success)}."""
    rng = random.Random(seed)
    events: list[AgentEvent] = []
    truth: dict[str, tuple[list[float], bool]] = {}
    for k in range(n_conv):
        cid = f"c{seed}-{k}"
        at = k * 37.0
        confs = [round(rng.random(), 3) for _ in range(rng.randint(1, 3))]
        ok = rng.random() < 0.6
        truth[cid] = (confs, ok)
        events.append(event(f"{cid}-u", cid, at=at, role="user", content="hi", confidence=None))
        for j, c in enumerate(confs):
            events.append(event(f"{cid}-a{j}", cid, at=at + 1 + j, confidence=c))
        if with_outcome:
            events.append(event(f"{cid}-o", cid, "outcome", at=at + 9, success=ok))
    return events, truth


def expected(truth: dict, weight_of=lambda cid: 1.0) -> BinSums:
    """Sums of the items in the probability sample (weight 0 items are not stored in bins)."""
    conf, y, w = [], [], []
    for cid, (confs, ok) in truth.items():
        if weight_of(cid) == 0:
            continue
        for c in confs:
            conf.append(c)
            y.append(1.0 if ok else 0.0)
            w.append(weight_of(cid))
    return BinSums.from_items(conf, y, w)


async def write(writer: EventWriter, events: list[AgentEvent], batch: int = 50) -> None:
    for i in range(0, len(events), batch):
        await writer.write([event_row(e) for e in events[i : i + batch]])


async def test_bins_equal_direct_computation_at_every_resolution(database_url, writer):
    events, truth = build(300, seed=1)
    await write(writer, events)
    want = expected(truth)
    assert want.total_count > 300
    for res in ("1m", "1h", "1d"):
        got = await stored(database_url, res)
        assert got.isclose(want), res
        assert ece(got) == pytest.approx(ece(want), abs=1e-12)
        assert brier(got) == pytest.approx(brier(want), abs=1e-12)
    # hourly rows of a sub-range sum to the raw items of that range (mergeability)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        n_hours = await conn.fetchval(
            "SELECT count(DISTINCT window_start) FROM calibration_bins WHERE resolution = '1h'"
        )
        assert n_hours >= 3
    finally:
        await conn.close()


async def test_replay_changes_nothing(database_url, writer):
    events, truth = build(80, seed=2)
    await write(writer, events)
    before = await stored(database_url, "1h")
    shuffled = list(events)
    random.Random(5).shuffle(shuffled)
    await write(writer, shuffled, batch=33)
    assert await stored(database_url, "1h") == before
    assert before.isclose(expected(truth))


async def test_late_outcome_labels_items_and_relabel_moves_them(database_url, writer):
    events, truth = build(60, seed=3, with_outcome=False)
    await write(writer, events)
    assert (await stored(database_url, "1h")).total_count == 0  # nothing labelled yet
    outcomes = [
        event(f"{cid}-o", cid, "outcome", at=99_000, success=ok, source="csat")
        for cid, (_, ok) in truth.items()
    ]
    await write(writer, outcomes)
    assert (await stored(database_url, "1h")).isclose(expected(truth))
    # a ground-truth outcome beats the csat one and flips every label
    flipped = {cid: (confs, not ok) for cid, (confs, ok) in truth.items()}
    gt = [
        event(f"{cid}-gt", cid, "outcome", at=99_500, success=ok, source="ground_truth")
        for cid, (_, ok) in flipped.items()
    ]
    await write(writer, gt)
    got = await stored(database_url, "1h")
    assert got.isclose(expected(flipped), atol=1e-9)
    assert got.total_count == expected(flipped).total_count  # moved, not added
    await write(writer, gt + outcomes)  # re-delivery of both: nothing changes
    assert (await stored(database_url, "1h")).isclose(got, atol=1e-12)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        assert await assert_design_tables_match_items(conn) == 60
    finally:
        await conn.close()


async def test_sampling_weights(database_url):
    policy = SamplingPolicy.from_mapping(
        {"default_rate": 0.5, "salt": "s1", "always_sample": {"escalation": True}}
    )
    w = EventWriter(database_url, policy=policy)
    await w.start()
    try:
        events, truth = build(200, seed=4)
        await write(w, events)
    finally:
        await w.close()

    def weight(cid: str) -> float:
        return 2.0 if hash_unit(cid, "s1") < 0.5 else 0.0

    want = expected(truth, weight)
    got = await stored(database_url, "1d")
    assert got.isclose(want)
    in_sample = sum(1 for cid in truth if weight(cid) > 0)
    assert 60 < in_sample < 140
    rows = await fetch(
        database_url,
        "SELECT conversation_id, sample_rate, sampled_by_rate, sample_weight, sample_policy"
        " FROM conversations",
    )
    assert len(rows) == 200
    for r in rows:
        assert r["sample_rate"] == 0.5
        assert r["sample_weight"] == weight(r["conversation_id"])
        assert r["sampled_by_rate"] == (weight(r["conversation_id"]) > 0)
        assert r["sample_policy"] == policy.digest()


async def test_sql_bins_match_numpy_on_edges(database_url):
    from monitor.analytics.bins import bin_index

    values = [0.0, 0.1, 0.3, 0.7, 0.9999999999, 1.0, 0.29999999999999993]
    values += list(np.nextafter(np.arange(1, 10) / 10, 0)) + list(np.arange(0, 11) / 10)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        got = [await conn.fetchval(f"SELECT {bin_sql('$1::float8')}", float(v)) for v in values]
    finally:
        await conn.close()
    assert got == [int(b) for b in bin_index(values)]
