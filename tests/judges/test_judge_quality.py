"""Judge quality at the conversation level: hand-computed precision/recall/kappa, the report on
the committed tau2 runs, the Rogan-Gladen correction, and the precision floor on the lower end
of the interval, per scope, in Postgres (a judge labels a scope's items only when the
measurement shows its precision clears the floor; `monitor judges` says so)."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterable
from pathlib import Path

import asyncpg
import pytest
from typer.testing import CliRunner

from monitor.analytics.calibration import Proportion
from monitor.cli.main import app
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.judges import repo as judge_repo
from monitor.judges.base import Conversation, Verdict
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.domains import load_domains
from monitor.judges.quality import (
    ANY_DETERMINISTIC,
    ANY_JUDGE,
    POOLED,
    ConversationJudgement,
    ScopeCounts,
    corrected_accuracy,
    judge_quality,
    labelling,
    labelling_of_counts,
    labels,
    labels_in,
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
    assert not any(r.labels for r in q.values())  # 3/4 right: lower end 0.30 < 0.7


def test_a_judge_labels_only_when_the_lower_end_clears_the_floor() -> None:
    def right(n: int, k: int | None = None) -> list[ConversationJudgement]:
        k = n if k is None else k
        return [cj(f"c{i}", "policy.x.rule", True, i < k) for i in range(n)]

    assert not judge_quality(right(2))[0].labels  # right 2 of 2 times: lower end 0.34
    assert not judge_quality(right(8))[0].labels  # 8 of 8: 0.68
    assert judge_quality(right(9))[0].labels  # 9 of 9: 0.70
    assert not judge_quality(right(30, 25))[0].labels  # 0.83 measured, lower end 0.66
    assert judge_quality(right(40, 36))[0].labels  # 0.90, lower end 0.77
    assert judge_quality(right(30, 25), floor=0.6)[0].labels
    assert not judge_quality([cj("c0", "policy.x.rule", False, True)])[0].labels  # no flag
    (row,) = labelling(right(2))[:1]
    assert (row.agent_id, row.pairs, row.labels) == (POOLED, 2, False)
    assert (row.precision.k, row.precision.n) == (2, 2)
    assert row.precision.low == pytest.approx(wilson(2, 2)[0])
    assert not labels(Proportion.of(2, 2)) and labels(Proportion.of(9, 9))


def scoped(scope: str, n: int, right: int, start: int = 0) -> list[ConversationJudgement]:
    """``n`` conversations of agent ``scope`` (domain "d"), all flagged by det.x; the first
    ``right`` of them failed."""
    return [
        ConversationJudgement(
            f"{scope}{i}", "det.x", "1", True, frozenset(), i - start < right, scope, "d"
        )
        for i in range(start, start + n)
    ]


def test_a_scope_with_enough_pairs_decides_by_its_own_interval() -> None:
    # a: 40/40 right, b: 18/30 right (its own lower end 0.42), c: 1 of 5 right (too few: pooled)
    js = scoped("a", 40, 40) + scoped("b", 30, 18) + scoped("c", 5, 1)
    js.append(ConversationJudgement("e0", "det.x", "1", False, frozenset(), True, "e", ""))
    rows = {(r.agent_id, r.domain): r for r in labelling(js, 0.7, 30)}
    pooled = rows[(POOLED, "")]
    assert (pooled.precision.k, pooled.precision.n, pooled.pairs) == (59, 75, 76)
    assert pooled.precision.low == pytest.approx(wilson(59, 75)[0])
    assert pooled.labels is False  # 0.79 measured, lower end 0.68
    assert (rows[("a", "d")].decided_by, rows[("a", "d")].labels) == ("scope", True)
    assert (rows[("b", "d")].decided_by, rows[("b", "d")].labels) == ("scope", False)
    assert (rows[("c", "d")].decided_by, rows[("c", "d")].labels) == ("pooled", False)
    assert rows[("e", "")].precision.n == 0 and rows[("e", "")].decided_by == "pooled"
    decide = labels_in(labelling(js, 0.7, 30))
    assert decide("det.x", "1", "a", "d") and not decide("det.x", "1", "b", "d")
    assert not decide("det.x", "1", "new-agent", "d") and not decide("det.y", "1", "a", "d")
    # with a larger pooled sample the pooled interval clears the floor: c and new scopes label
    more = js + scoped("a", 60, 60, start=40)
    decide = labels_in(labelling(more, 0.7, 30))
    assert decide("det.x", "1", "c", "d") and decide("det.x", "1", "new-agent", "x")
    assert not decide("det.x", "1", "b", "d")  # its own interval still decides against
    # the "any judge" row counts det.x's flags only where it labels (a, c; not b)
    other = [
        ConversationJudgement(
            j.conversation_id, "llm", "m", False, frozenset(), j.failed, j.agent_id, j.domain
        )
        for j in more
    ]
    anyj = next(r for r in judge_quality(more + other) if r.judge == ANY_JUDGE)
    assert (anyj.true_pos, anyj.false_pos) == (100 + 1, 4)
    assert anyj.false_neg == 18 + 1


def test_labelling_from_counts_split_over_rows_equals_labelling_of_the_conversations() -> None:
    """The store sums counts per judge, version and scope (the refresh never lists the
    conversations): rows of one scope add up, and the decisions equal those on the list."""
    js = scoped("a", 40, 40) + scoped("b", 30, 18) + scoped("c", 5, 1)
    js += [
        ConversationJudgement(f"e{i}", "det.y", "2", i % 3 == 0, frozenset(), i % 2 == 0, "e")
        for i in range(50)
    ]
    halves = [
        ScopeCounts(
            j.judge,
            j.judge_version,
            j.agent_id,
            j.domain,
            1,
            int(j.flagged),
            int(j.failed),
            int(j.flagged and j.failed),
        )
        for j in js
    ]
    assert labelling_of_counts(halves, 0.7, 30) == labelling(js, 0.7, 30)
    zero = ScopeCounts("det.z", "1", "a", "d", 0, 0, 0, 0)
    assert labelling_of_counts([zero]) == []  # no pairs: no row, as with no conversations
    rows = labelling_of_counts([ScopeCounts("det.x", "1", "a", "d", 12, 10, 9, 8)], 0.7, 30)
    assert [(r.agent_id, r.pairs, r.precision.k, r.precision.n, r.recall.n) for r in rows] == [
        (POOLED, 12, 8, 10, 9),
        ("a", 12, 8, 10, 9),
    ]


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
            agent, domain = evs[0].agent.id, (evs[0].context.domain or "")
            out += [
                ConversationJudgement(
                    cid, j, "2", f, frozenset(c), not outcome.success, agent, domain
                )
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
    assert all(r.precision.n < 30 and not r.labels for r in report.values())


def flags(judge: str, ids: Iterable[int], *, ok: Iterable[int] = ()) -> list[Verdict]:
    """``judge`` flags the first message of conversations q{i} for ``ids``, passes ``ok``."""
    out = [
        Verdict(judge, "1", f"q{i}", f"q{i}-a", label=0, score=0.0, categories=("wrong_action",))
        for i in ids
    ]
    return out + [Verdict(judge, "1", f"q{i}", f"q{i}-a", label=1) for i in ok]


async def write_conversations(url: str, ids: Iterable[int], failed: Iterable[int] = ()) -> None:
    """Conversations q{i} of agent-a with one assistant message; those in ``failed`` or with
    an id < 40 or >= 60 get an outcome (success unless in ``failed``)."""
    bad = set(failed)
    events = []
    for i in ids:
        cid = f"q{i}"
        events.append(event(f"{cid}-a", cid, at=i, confidence=0.9))
        if i < 40 or i >= 60:
            events.append(event(f"{cid}-o", cid, "outcome", at=i + 0.5, success=i not in bad))
    w = EventWriter(url)
    await w.write([event_row(e) for e in events])
    await w.close()


async def test_a_rule_right_2_of_2_times_never_labels(database_url: str) -> None:
    """Two flags, both right: a precision of 1.00 whose interval reaches down to 0.34. The
    rule's flag on a conversation without an outcome labels nothing, before the measurement
    and after it; with 9 of 9 right it would."""
    await write_conversations(database_url, [0, 1, 2, 40], failed=[0, 1])
    pool = await asyncpg.create_pool(libpq_url(database_url))
    try:
        agents = {f"q{i}": "agent-a" for i in range(70)}
        await judge_repo.write_verdicts(pool, agents, flags("policy.x.pair", [0, 1, 40], ok=[2]))
        unlabelled = "SELECT label IS NULL FROM items WHERE event_id = 'q40-a'"
        assert await pool.fetchval(unlabelled)
        decisions, changes = await refresh_judge_quality(pool, 0.7, 30)
        assert changes == [] and await pool.fetchval(unlabelled)
        pooled = decisions[0]
        assert (pooled.agent_id, pooled.precision.k, pooled.precision.n) == (POOLED, 2, 2)
        assert pooled.precision.value == 1.0 and not pooled.labels
        row = await pool.fetchrow(
            "SELECT flagged, precision, precision_low, labels FROM judge_quality"
            " WHERE judge = 'policy.x.pair' AND agent_id = ''"
        )
        assert (row["flagged"], row["precision"], row["labels"]) == (2, 1.0, False)
        assert row["precision_low"] == pytest.approx(wilson(2, 2)[0])
    finally:
        await pool.close()


async def test_floor_on_the_lower_end_decides_labels_and_cli_says_so(database_url: str) -> None:
    await write_conversations(database_url, range(50), failed=range(16))
    # 40 with an outcome (q0-q15 failed), q40-q49 without. det.noisy flags 35 with an outcome
    # (14 failed: 0.4) and the 10 without; det.good flags the 16 failures and q40, q41; the
    # rule is right the 2 times it flags with an outcome (q0, q1) and flags q42 too
    verdicts = flags("det.noisy", [*range(14), *range(19, 50)])
    verdicts += flags("det.good", [*range(16), 40, 41], ok=[*range(16, 40), *range(42, 50)])
    verdicts += flags("policy.x.pair", [0, 1, 42], ok=range(2, 6))
    pool = await asyncpg.create_pool(libpq_url(database_url))
    env = {"MONITOR_DATABASE_URL": database_url}
    try:
        agents = {f"q{i}": "agent-a" for i in range(70)}
        await judge_repo.write_verdicts(pool, agents, verdicts)

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

        # nothing is measured yet: no judge labels anything
        assert await judge_labelled() == 0 and await bins() == (40, 24.0)
        decisions, changes = await refresh_judge_quality(pool, 0.7, 30)
        got = {(d.judge, d.agent_id): d for d in decisions}
        assert got[("det.good", POOLED)].labels  # 16 of 16: lower end 0.81
        assert got[("det.good", "agent-a")].decided_by == "pooled"  # 16 < 30 flagged
        noisy = got[("det.noisy", POOLED)]
        assert (noisy.precision.k, noisy.precision.n, noisy.labels) == (14, 35, False)
        pair = got[("policy.x.pair", POOLED)]  # right 2 of 2 times: never labels
        assert (pair.precision.k, pair.precision.n, pair.labels) == (2, 2, False)
        assert pair.precision.low == pytest.approx(wilson(2, 2)[0])
        # q40, q41 get det.good's label 0; q42 (flagged by the rule only) stays unlabelled
        assert [(c.judge, c.agent_id, c.domain, c.muted, c.relabelled) for c in changes] == [
            ("det.good", "agent-a", "retail", False, 2)
        ]
        assert await judge_labelled() == 2 and await bins() == (42, 24.0)
        labels_of = {
            r["event_id"]: (r["label"], r["label_source"])
            for r in await pool.fetch("SELECT event_id, label, label_source FROM items")
        }
        assert labels_of["q40-a"] == (0, "judge:det.good") and labels_of["q42-a"] == (None, None)
        async with pool.acquire() as conn:
            assert await assert_design_tables_match_items(conn) == 42
        assert (await refresh_judge_quality(pool, 0.7, 30))[1] == []  # idempotent
        stored = await pool.fetch(
            "SELECT judge, agent_id, domain, flagged, precision_low, decided_by, labels"
            " FROM judge_quality ORDER BY judge, agent_id"
        )
        assert [(r["judge"], r["agent_id"], r["decided_by"], r["labels"]) for r in stored] == [
            ("det.good", "", "pooled", True),
            ("det.good", "agent-a", "pooled", True),
            ("det.noisy", "", "pooled", False),
            ("det.noisy", "agent-a", "scope", False),  # 35 flagged: its own interval
            ("policy.x.pair", "", "pooled", False),
            ("policy.x.pair", "agent-a", "pooled", False),
        ]
        assert stored[4]["flagged"] == 2
        assert stored[4]["precision_low"] == pytest.approx(wilson(2, 2)[0])

        cal = await asyncio.to_thread(
            CliRunner().invoke, app, ["calibration", "--since", "3650d", "--json"], env=env
        )
        assert cal.exit_code == 0, cal.output
        jl = json.loads(cal.output)["judge_labels"]["agent-a"]
        assert (jl["labelled_items"], jl["judge_labelled_items"]) == (42, 2)
        corr = {c["judge"]: c for c in jl["judges"]}
        # det.noisy: sensitivity 14/16, specificity 3/24: se + sp = 1, no better than chance
        assert (
            corr["det.noisy"]["judged_without_outcome"],
            corr["det.noisy"]["flagged_without_outcome"],
        ) == (10, 10)
        assert "chance" in corr["det.noisy"]["accuracy"]["note"]
        # det.good: se = sp = 1 on the outcomes, so corrected = raw = 1 - 2/10
        assert corr["det.good"]["accuracy"]["corrected"] == pytest.approx(0.8)

        # det.good flags 8 more conversations without an outcome (labelled at once: it labels)
        # and 7 that succeed: 16 of 23 right, lower end 0.49: it stops labelling everywhere
        await write_conversations(database_url, [*range(50, 58), *range(60, 67)])
        await judge_repo.write_verdicts(
            pool, agents, flags("det.good", [*range(50, 58), *range(60, 67)])
        )
        assert await judge_labelled() == 10
        _, changes = await refresh_judge_quality(pool, 0.7, 30)
        assert [(c.judge, c.agent_id, c.domain, c.muted, c.relabelled) for c in changes] == [
            ("det.good", "agent-a", "retail", True, 10)
        ]
        assert await judge_labelled() == 0 and await bins() == (47, 31.0)
        async with pool.acquire() as conn:
            assert await assert_design_tables_match_items(conn) == 47
        assert await pool.fetchval("SELECT count(*) FROM verdicts") == 117  # all still stored
    finally:
        await pool.close()

    args = ["judges", "--since", "3650d"]
    res = await asyncio.to_thread(CliRunner().invoke, app, [*args, "--json"], env=env)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    rows = {(r["judge"], r["category"]): r for r in out["quality"]}
    assert rows[("det.noisy", None)]["labels"] is False
    assert rows[("det.noisy", None)]["precision"]["value"] == pytest.approx(0.4)
    good = rows[("det.good", None)]
    assert (good["precision"]["k"], good["precision"]["n"], good["labels"]) == (16, 23, False)
    scoped_rows = {(r["judge"], r["agent_id"]): r for r in out["labelling"]}
    pair = scoped_rows[("policy.x.pair", "agent-a")]
    assert (pair["pairs"], pair["precision"]["n"], pair["decided_by"], pair["labels"]) == (
        6,
        2,
        "pooled",
        False,
    )
    stored_rows = {(r["judge"], r["agent_id"]): r for r in out["stored"]}
    assert stored_rows[("policy.x.pair", "")]["labels"] is False
    assert out["floor"] == {"precision": 0.7, "min_pairs": 30}
    text = await asyncio.to_thread(CliRunner().invoke, app, args, env={**env, "COLUMNS": "300"})
    assert text.exit_code == 0
    assert "labels nothing: pooled lower end 0.34 < 0.7" in text.output
    assert "labelling per scope" in text.output
    line = next(x for x in text.output.splitlines() if "policy.x.pair" in x and "agent-a" in x)
    assert "1.00 [0.34, 1.00] (2/2)" in line and "pooled" in line and "no" in line


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
