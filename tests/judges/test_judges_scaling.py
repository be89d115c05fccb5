"""The deterministic judges are linear in conversation length: doubling a conversation at most
(about) doubles their CPU time and their peak memory, and their evidence stays bounded."""

from __future__ import annotations

import gc
import json
import time
import tracemalloc
from itertools import pairwise

import pytest

from monitor.judges.airline import domain
from monitor.judges.base import Conversation
from monitor.judges.deterministic import (
    AuthorizationFabricationJudge,
    IgnoredToolErrorJudge,
    deterministic_judges,
)
from monitor.judges.evidence import EVIDENCE_KEEP
from monitor.judges.figures import SourceIndex, _terms, extract_figures
from monitor.judges.lexicon import _claims
from tests.judges.long_conversation import long_conversation
from tests.judges.test_judges_deterministic import Conv

SIZES = (2000, 4000, 8000)
#: generous: linear code measures about 2 per doubling, the quadratic judges about 4
RATIO_BOUND = 3.0


def cold() -> None:
    """Empty the judges' memo caches (a new conversation's texts are not in them) and collect."""
    _terms.cache_clear()
    _claims.cache_clear()
    gc.collect()


def _cost(conv: Conversation) -> tuple[float, int, int]:
    """(CPU seconds, peak traced bytes, verdicts) of every deterministic judge on ``conv``;
    the CPU time is the best of three runs (the machine is shared)."""
    judges = deterministic_judges(domain().references)
    cpu = []
    for _ in range(3):
        cold()
        started = time.process_time()
        verdicts = [v for j in judges for v in j.judge(conv)]
        cpu.append(time.process_time() - started)
    cold()
    tracemalloc.start()
    try:
        verdicts = [v for j in judges for v in j.judge(conv)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return min(cpu), peak, len(verdicts)


@pytest.mark.slow  # judges 14,000 events three times
def test_doubling_a_conversation_at_most_about_doubles_judge_time_and_memory() -> None:
    costs = {n: _cost(Conversation.of(long_conversation(n))) for n in SIZES}
    for small, big in pairwise(SIZES):
        (t1, m1, v1), (t2, m2, v2) = costs[small], costs[big]
        assert v2 <= 2.1 * v1  # the work itself doubles: one verdict per judged message
        assert t2 / t1 <= RATIO_BOUND, (small, big, costs)
        assert m2 / m1 <= RATIO_BOUND, (small, big, costs)


def test_evidence_of_a_long_conversation_is_bounded() -> None:
    conv = Conversation.of(long_conversation(8000))
    verdicts = [v for j in deterministic_judges() for v in j.judge(conv)]
    biggest = max(len(json.dumps(v.evidence)) for v in verdicts)
    assert biggest < 8_000  # the quadratic judges cited every earlier call: ~120 KB here
    last = [v for v in verdicts if v.judge == "det.authorization"][-1]
    claims = {c["family"]: c for c in last.evidence["claims"]}
    cited = claims["cancel"]["supported_by"]
    assert len(cited) == 2 * EVIDENCE_KEEP
    assert claims["cancel"]["supported_by_total"] > 600  # every earlier cancel is counted
    # the first and the last backing calls are the ones cited at each end
    assert cited[0]["call_id"] == "k0" and cited[-1]["name"] == "cancel_reservation"
    assert last.label == 1


def test_many_failures_before_an_answer_are_cited_first_and_last_with_their_count() -> None:
    c = Conv()
    c.user("Please refund order #W123456.")
    for i in range(40):
        c.say(None, (f"k{i}", "refund_order", {"order_id": "#W123456", "try": i}))
        c.result(f"k{i}", "refund_order", f"Error: gateway rejected attempt {i}", ok=False)
    c.result("x", "lookup_order", "{}")  # another tool's success supersedes nothing
    m = c.say("Your refund is done!")
    (v,) = IgnoredToolErrorJudge().judge(c.conv())
    assert v.item_id == m and v.label == 0
    failed = v.evidence["failed_calls"]
    assert [f["call_id"] for f in failed] == [f"k{i}" for i in (0, 1, 2, 3, 4, 35, 36, 37, 38, 39)]
    assert v.evidence["failed_calls_total"] == 40


def test_a_short_conversation_cites_every_backing_call_without_a_total() -> None:
    c = Conv()
    c.user("Cancel both, please.")
    for i in range(3):
        c.say(None, (f"k{i}", "cancel_reservation", {"reservation_id": f"R{i}"}))
        c.result(f"k{i}", "cancel_reservation", '{"status": "cancelled"}')
    m = c.say("Both reservations have been cancelled.")
    (v,) = AuthorizationFabricationJudge().judge(c.conv())
    (claim,) = v.evidence["claims"]
    assert v.item_id == m and v.label == 1
    assert [s["call_id"] for s in claim["supported_by"]] == ["k0", "k1", "k2"]
    assert "supported_by_total" not in claim


def test_a_date_without_a_year_is_found_among_many_dates_with_its_first_source() -> None:
    index = SourceIndex()
    for i in range(3000):
        index.add(f"flight on 20{i % 90 + 10:02d}-0{i % 9 + 1}-1{i % 9}", f"e{i}")
    (may,) = extract_figures("see you on May 14")
    (june,) = extract_figures("or on June 30")
    assert index.source_of(may) == "e4"  # 2014-05-14, the first of the 05-14 dates
    assert index.source_of(june) is None
