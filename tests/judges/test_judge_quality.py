"""Judge quality at the conversation level: hand-computed precision/recall/kappa, the report on
the committed tau2 runs, the Rogan-Gladen correction, and the precision floor in Postgres
(a judge below it stops labelling items; `monitor judges` says so)."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import asyncpg
import pytest
from typer.testing import CliRunner

from monitor.cli.main import app
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.judges import repo as judge_repo
from monitor.judges.base import Conversation, Verdict
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.domains import load_domains
from monitor.judges.quality import (
    ANY_DETERMINISTIC,
    ConversationJudgement,
    corrected_accuracy,
    judge_quality,
)
from monitor.judges.quality_repo import refresh_judge_quality
from monitor.judges.worker import JudgeRunner
from monitor.replay.tau2 import tau2_file_events
from monitor.store.engine import libpq_url
from tests.analytics.design_tables import assert_design_tables_match_items
from tests.factories import event

Z = 1.959963984540054


def wilson(k: int, n: int) -> tuple[float, float]:
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z / (1 + Z * Z / n) * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return centre - half, centre + half


def cj(cid: str, judge: str, flagged: bool, failed: bool, *cats: str) -> ConversationJudgement:
    return ConversationJudgement(cid, judge, "1", flagged, frozenset(cats), failed)


def test_precision_recall_kappa_by_hand() -> None:
    # det.a on 10 conversations: flags 4 (3 failed, 1 succeeded); 2 failures unflagged
    rows = [
        cj(
            f"c{i}",
            "det.a",
            i < 4,
            i < 3 or i in (4, 5),
            *(("fabrication", "fabrication:pricing") if i < 2 else ("fabrication",)),
        )
        for i in range(10)
    ]
    rows += [cj("c0", "det.b", False, True), cj("c9", "det.b", True, False, "wrong_action")]
    q = {(r.judge, r.category): r for r in judge_quality(rows)}
    a = q[("det.a", None)]
    assert (a.pairs, a.true_pos, a.false_pos, a.false_neg, a.true_neg) == (10, 3, 1, 2, 4)
    assert a.precision.value == 0.75 and (a.precision.low, a.precision.high) == pytest.approx(
        wilson(3, 4)
    )
    assert a.recall.value == 0.6 and (a.recall.low, a.recall.high) == pytest.approx(wilson(3, 5))
    po, pe = 7 / 10, (4 / 10) * (5 / 10) + (6 / 10) * (5 / 10)
    assert a.kappa == pytest.approx((po - pe) / (1 - pe))
    pricing = q[("det.a", "fabrication:pricing")]
    assert (pricing.true_pos, pricing.false_pos, pricing.false_neg) == (2, 0, 3)
    # any deterministic judge: c9 flagged by det.b only -> 5 flagged of 10, 3 failed
    anyd = q[(ANY_DETERMINISTIC, None)]
    assert (anyd.pairs, anyd.true_pos, anyd.false_pos) == (10, 3, 2)
    assert not any(r.below_floor for r in q.values())  # 4 flags < 30 pairs


def test_floor_needs_enough_flagged_conversations() -> None:
    low = [cj(f"c{i}", "det.noisy", True, i < 20) for i in range(30)]  # 20/30 = 0.67
    assert judge_quality(low)[0].below_floor
    assert not judge_quality(low[:29])[0].below_floor  # 29 flagged: too few to act on
    assert not judge_quality(low, floor=0.6)[0].below_floor


def test_rogan_gladen_correction() -> None:
    # judge labels say 80 % correct; se 0.6, sp 0.9: q = 0.2 = 0.6 f + 0.1 (1 - f) -> f = 0.2
    got = corrected_accuracy(0.8, 0.6, 0.9)
    assert got.raw == 0.8 and got.corrected == pytest.approx(0.8)
    got = corrected_accuracy(0.9, 0.5, 0.95)  # q = 0.1 -> f = (0.1 - 0.05) / 0.45
    assert got.corrected == pytest.approx(1 - 0.05 / 0.45)
    assert corrected_accuracy(0.9, 0.3, 0.6).corrected is None  # no better than chance
    assert corrected_accuracy(0.9, None, 0.6).note is not None
    assert corrected_accuracy(0.99, 0.6, 0.9).corrected == 1.0  # clipped


def tau2_judgements(files: list[Path]) -> list[ConversationJudgement]:
    runner = JudgeRunner(deterministic_judges(), domains=load_domains())
    out: list[ConversationJudgement] = []
    for f in files:
        convs: dict[str, list] = {}
        for e in tau2_file_events(f):
            convs.setdefault(e.conversation_id, []).append(e)
        for cid, evs in convs.items():
            outcome = next((e.outcome for e in evs if e.outcome is not None), None)
            if outcome is None:
                continue
            per: dict[str, tuple[bool, set[str]]] = {}
            for v in asyncio.run(runner.run(Conversation.of(evs), set())):
                flagged, cats = per.get(v.judge, (False, set()))
                per[v.judge] = (
                    flagged or v.label == 0,
                    cats | (set(v.categories) if v.label == 0 else set()),
                )
            out += [
                ConversationJudgement(cid, j, "2", f, frozenset(c), not outcome.success)
                for j, (f, c) in per.items()
            ]
    return out


def test_judge_report_on_tau2(tau2_files: list[Path]) -> None:
    report = {(r.judge, r.category): r for r in judge_quality(tau2_judgements(tau2_files))}
    for r in report.values():
        print(
            f"{r.judge:26} {r.category or '(all)':26} pairs={r.pairs:3} "
            f"P={r.precision.value} {r.precision.k}/{r.precision.n} "
            f"R={r.recall.value} {r.recall.k}/{r.recall.n} kappa={r.kappa}"
        )
    rep = report[("det.repeated_call", None)]
    assert (rep.true_pos, rep.false_pos, rep.recall.n) == (3, 1, 16)  # 3 of 4 flagged failed
    assert (rep.precision.low, rep.precision.high) == pytest.approx(wilson(3, 4))
    fig = report[("det.unsupported_figure", None)]
    assert (fig.true_pos, fig.false_pos) == (1, 1)  # "$477" (failed), "May 10th" (succeeded)
    anyd = report[(ANY_DETERMINISTIC, None)]
    assert anyd.pairs == 37 and anyd.precision.n == 7 and anyd.kappa is not None
    assert all(r.precision.n < 30 and not r.below_floor for r in report.values())


async def test_floor_stops_labelling_and_cli_says_so(database_url: str) -> None:
    events = []
    for i in range(50):  # 40 with an outcome (16 failed), 10 without
        cid = f"q{i}"
        events.append(event(f"{cid}-a", cid, at=i, confidence=0.9))
        if i < 40:
            events.append(event(f"{cid}-o", cid, "outcome", at=i + 0.5, success=i >= 16))
    w = EventWriter(database_url)
    await w.write([event_row(e) for e in events])
    await w.close()
    # det.noisy flags 35 with an outcome (14 failed: precision 0.4) and the 10 without;
    # det.good flags the 16 failures only
    verdicts = [
        Verdict(
            "det.noisy", "1", f"q{i}", f"q{i}-a", label=0, score=0.0, categories=("wrong_action",)
        )
        for i in [*range(14), *range(19, 50)]
    ]
    verdicts += [
        Verdict(
            "det.good",
            "1",
            f"q{i}",
            f"q{i}-a",
            label=0 if i < 16 or i in (40, 41) else 1,
            categories=("wrong_information",) if i < 16 or i in (40, 41) else (),
        )
        for i in range(50)
    ]  # on q40-q49, without outcome: flags 2
    pool = await asyncpg.create_pool(libpq_url(database_url))
    try:
        await judge_repo.write_verdicts(pool, {f"q{i}": "agent-a" for i in range(50)}, verdicts)

        async def judge_labelled() -> int:
            return int(
                await pool.fetchval("SELECT count(*) FROM items WHERE label_source LIKE 'judge:%'")
            )

        async def bins() -> tuple[int, float]:
            row = await pool.fetchrow(
                "SELECT sum(count) AS n, sum(sum_y) AS y"
                " FROM calibration_bins WHERE resolution = '1d'"
            )
            return int(row["n"]), float(row["y"])

        assert await judge_labelled() == 10 and await bins() == (50, 24.0)
        env = {"MONITOR_DATABASE_URL": database_url}
        cal = await asyncio.to_thread(
            CliRunner().invoke, app, ["calibration", "--since", "3650d", "--json"], env=env
        )
        assert cal.exit_code == 0, cal.output
        jl = json.loads(cal.output)["judge_labels"]["agent-a"]
        assert (jl["labelled_items"], jl["judge_labelled_items"]) == (50, 10)
        assert jl["judge_share"] == pytest.approx(0.2)
        corr = {c["judge"]: c for c in jl["judges"]}
        # det.noisy: sensitivity 14/16, specificity 3/24: se + sp = 1, no better than chance
        assert (
            corr["det.noisy"]["judged_without_outcome"],
            corr["det.noisy"]["flagged_without_outcome"],
        ) == (10, 10)
        assert corr["det.noisy"]["accuracy"]["corrected"] is None
        assert "chance" in corr["det.noisy"]["accuracy"]["note"]
        # det.good: se = sp = 1 on the outcomes, so corrected = raw = 1 - 2/10
        assert corr["det.good"]["accuracy"]["raw"] == pytest.approx(0.8)
        assert corr["det.good"]["accuracy"]["corrected"] == pytest.approx(0.8)
        cal_text = await asyncio.to_thread(
            CliRunner().invoke,
            app,
            ["calibration", "--since", "3650d"],
            env={**env, "COLUMNS": "300"},
        )
        assert "are labelled by judges, not outcomes" in cal_text.output
        assert "corrected (Rogan-Gladen)" in cal_text.output
        quality, changes = await refresh_judge_quality(pool, 0.7, 30)
        noisy = next(q for q in quality if q.judge == "det.noisy")
        assert (noisy.precision.k, noisy.precision.n, noisy.below_floor) == (14, 35, True)
        # q40, q41 stay labelled by det.good (its label 0), the other 8 lose their label
        assert [(c.judge, c.muted, c.relabelled) for c in changes] == [("det.noisy", True, 10)]
        assert await judge_labelled() == 2 and await bins() == (42, 24.0)
        async with pool.acquire() as conn:  # 8 items lost their label: their hours shrank
            assert await assert_design_tables_match_items(conn) == 42
        assert (await refresh_judge_quality(pool, 0.7, 30))[1] == []  # idempotent
        stored = await pool.fetch("SELECT judge, muted FROM judge_quality ORDER BY judge")
        assert [(r["judge"], r["muted"]) for r in stored] == [
            ("det.good", False),
            ("det.noisy", True),
        ]
        assert await pool.fetchval("SELECT count(*) FROM verdicts") == 95  # all still stored
    finally:
        await pool.close()

    args = ["judges", "--since", "3650d"]
    res = await asyncio.to_thread(CliRunner().invoke, app, [*args, "--json"], env=env)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    rows = {(r["judge"], r["category"]): r for r in out["quality"]}
    assert rows[("det.noisy", None)]["below_floor"] is True
    assert rows[("det.noisy", None)]["precision"]["value"] == pytest.approx(0.4)
    good = rows[("det.good", None)]
    assert (good["precision"]["value"], good["recall"]["value"], good["kappa"]) == (1.0, 1.0, 1.0)
    assert out["floor"] == {"precision": 0.7, "min_pairs": 30}
    text = await asyncio.to_thread(CliRunner().invoke, app, args, env={**env, "COLUMNS": "300"})
    assert text.exit_code == 0
    assert "precision below the floor 0.7: stops labelling items" in text.output


async def test_judges_cli_on_tau2_matches_the_pure_report(
    database_url: str, tau2_files: list[Path]
) -> None:
    events = [e for f in tau2_files for e in tau2_file_events(f)]
    w = EventWriter(database_url)
    await w.write([event_row(e) for e in events])
    await w.close()
    runner = JudgeRunner(deterministic_judges(), domains=load_domains())
    convs: dict[str, list] = {}
    for e in events:
        convs.setdefault(e.conversation_id, []).append(e)
    verdicts = [v for evs in convs.values() for v in await runner.run(Conversation.of(evs), set())]
    pool = await asyncpg.create_pool(libpq_url(database_url))
    try:
        await judge_repo.write_verdicts(
            pool, {cid: evs[0].agent.id for cid, evs in convs.items()}, verdicts
        )
    finally:
        await pool.close()
    # the range selects conversations by when they happened: the tau2 runs are from 2025
    every = ["--from", "2000-01-01T00:00:00+00:00"]
    res = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["judges", "--json", *every],
        env={"MONITOR_DATABASE_URL": database_url},
    )
    assert res.exit_code == 0, res.output
    got = {(r["judge"], r["category"]): r for r in json.loads(res.output)["quality"]}
    pure = await asyncio.to_thread(tau2_judgements, tau2_files)  # it runs its own loop
    want = {(r.judge, r.category): r for r in judge_quality(pure)}
    assert set(got) == set(want)
    for key, r in want.items():
        g = got[key]
        assert (g["pairs"], g["true_pos"], g["false_pos"], g["false_neg"]) == (
            r.pairs,
            r.true_pos,
            r.false_pos,
            r.false_neg,
        ), key
        assert g["precision"]["low"] == pytest.approx(r.precision.low)
        assert g["recall"]["high"] == pytest.approx(r.recall.high)
