"""Judge agreement with ground truth: the pure math against a hand computation, and the
`monitor judges --json` numbers on verdicts stored in a real Postgres."""

from __future__ import annotations

import asyncio
import json
import random

import asyncpg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from monitor.cli.main import app
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.judges import repo as judge_repo
from monitor.judges.agreement import agreement
from monitor.judges.base import Verdict
from monitor.store.engine import libpq_url
from tests.factories import event


def kappa_by_hand(j: list[int], t: list[int]) -> float:
    n = len(j)
    po = sum(a == b for a, b in zip(j, t, strict=True)) / n
    pj, pt = sum(j) / n, sum(t) / n
    pe = pj * pt + (1 - pj) * (1 - pt)
    return (po - pe) / (1 - pe)


@settings(deadline=None)  # the first example imports scikit-learn (monitor.core.lazy)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=2, max_size=200))
def test_kappa_matches_hand_formula(pairs):
    j, t = [a for a, _ in pairs], [b for _, b in pairs]
    got = agreement(j, t)
    assert got.n == len(pairs)
    assert got.accuracy == pytest.approx(sum(a == b for a, b in pairs) / len(pairs))
    assert got.true_pos + got.true_neg + got.false_pos + got.false_neg == len(pairs)
    if len(set(j) | set(t)) < 2:
        assert got.kappa is None and not got.meaningful
    else:
        pj, pt = sum(j) / len(j), sum(t) / len(t)
        pe = pj * pt + (1 - pj) * (1 - pt)
        if pe < 1:
            assert got.kappa == pytest.approx(kappa_by_hand(j, t), abs=1e-9)


def test_agreement_edge_cases():
    assert agreement([], []).reason.startswith("no item")
    with pytest.raises(ValueError):
        agreement([1], [1, 0])
    with pytest.raises(ValueError):
        agreement([2], [1])
    perfect = agreement([0, 1] * 15, [0, 1] * 15)
    assert (perfect.kappa, perfect.accuracy, perfect.meaningful) == (1.0, 1.0, True)
    small = agreement([0, 1], [0, 1])
    assert small.kappa == 1.0 and not small.meaningful and "only 2" in small.reason


async def test_judges_cli_reports_agreement(database_url):
    rng = random.Random(5)
    truth = {f"c{k}": rng.random() < 0.6 for k in range(60)}
    events = []
    for cid, ok in truth.items():
        events += [
            event(f"{cid}-a", cid, at=1, confidence=0.8),
            event(f"{cid}-o", cid, "outcome", at=2, success=ok),
        ]
    w = EventWriter(database_url)
    await w.write([event_row(e) for e in events])
    await w.close()
    judge_labels = {
        cid: (int(ok) if rng.random() < 0.8 else 1 - int(ok)) for cid, ok in truth.items()
    }
    verdicts = [
        Verdict(
            "llm",
            "m/rubric-v1",
            cid,
            f"{cid}-a",
            label=lab,
            score=float(lab),
            categories=() if lab else ("wrong_information",),
            latency_ms=10.0 + i,
        )
        for i, (cid, lab) in enumerate(judge_labels.items())
    ]
    verdicts.append(Verdict("llm", "m/rubric-v1", "c0", None, status="error", error="timeout"))
    pool = await asyncpg.create_pool(libpq_url(database_url))
    try:
        await judge_repo.write_verdicts(pool, {cid: "agent-a" for cid in truth}, verdicts)
    finally:
        await pool.close()
    env = {"MONITOR_DATABASE_URL": database_url}
    # the range selects conversations by when they happened (2026-01-01), not by when they
    # were judged (now): the last 24 hours hold none of them
    recent = await asyncio.to_thread(  # the CLI runs its own event loop
        CliRunner().invoke, app, ["judges", "--json"], env=env
    )
    assert recent.exit_code == 0, recent.output
    assert json.loads(recent.output)["judges"] == []
    day = ["--from", "2026-01-01T00:00:00+00:00", "--to", "2026-01-02T00:00:00+00:00"]
    result = await asyncio.to_thread(CliRunner().invoke, app, ["judges", *day, "--json"], env=env)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    j = [judge_labels[c] for c in truth]
    t = [int(ok) for ok in truth.values()]
    # one item per conversation: "flagged" is label 0 and "failed" is truth 0; kappa is the
    # same with both classes swapped
    agree = next(r for r in out["quality"] if r["judge"] == "llm" and r["category"] is None)
    assert agree["pairs"] == 60
    assert agree["kappa"] == pytest.approx(kappa_by_hand(j, t), abs=1e-9)
    flagged_failed = sum(1 for a, b in zip(j, t, strict=True) if a == 0 and b == 0)
    assert agree["precision"]["k"] == flagged_failed and agree["precision"]["n"] == j.count(0)
    (vol,) = out["judges"]
    assert (vol["verdicts"], vol["errors"], vol["failures"]) == (61, 1, j.count(0))
    assert vol["error_reasons"] == {"timeout": 1}
    assert vol["categories"] == {"wrong_information": j.count(0)}
    # the judge labels became item labels only where no outcome exists: here every item has
    # an outcome, so every item is labelled by its outcome
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        sources = {r["label_source"] for r in await conn.fetch("SELECT label_source FROM items")}
    finally:
        await conn.close()
    assert sources == {"outcome:ground_truth"}
