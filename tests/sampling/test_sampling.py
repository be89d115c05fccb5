"""Stratified deterministic sampling: hashing, strata, rules, unbiasedness."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from monitor.core.errors import ConfigError
from monitor.sampling.policy import (
    ConversationFacts,
    ConversationSampler,
    SamplingDecision,
    SamplingPolicy,
    decide,
    decide_events,
    hash_unit,
    weighted_mean,
)
from tests.factories import event

ROOT = Path(__file__).resolve().parents[2]
TIERS_POLICY: dict[str, Any] = {
    "default_rate": 0.5,
    "strata": [
        {"tier": 3, "rate": 1.0},
        {"tier": 2, "rate": 0.1},
        {"tier": 1, "rate": 0.02},
        {"agent": "billing-*", "tier": 1, "rate": 0.25},
    ],
    "always_sample": {"confidence_floor": 0.3},
}


def facts(cid: str, **kw: Any) -> ConversationFacts:
    return ConversationFacts(cid, **kw)


# --- the hash -------------------------------------------------------------------------------


def test_hash_unit_is_the_documented_algorithm_and_pinned() -> None:
    for cid, salt in [("conversation-1", ""), ("conversation-1", "s"), ("é-ü-日本", "k")]:
        digest = hashlib.blake2b(cid.encode(), digest_size=8, key=salt.encode()).digest()
        assert hash_unit(cid, salt) == (int.from_bytes(digest, "big") >> 11) / 2**53
    # pinned: a change of algorithm would silently re-draw every sample
    assert hash_unit("conversation-1") == 0.395918097636485
    assert hash_unit("conversation-1", "s") == 0.5015156043293939
    assert hash_unit("") == 0.8931675160897388


def test_hash_unit_range_and_salt_limit() -> None:
    values = [hash_unit(f"c-{i}") for i in range(5000)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert len(set(values)) == 5000
    assert hash_unit("c", "a" * 64) != hash_unit("c")
    with pytest.raises(ValueError, match="64"):
        hash_unit("c", "a" * 65)


_CHILD = """
import json, sys
from monitor.sampling.policy import ConversationFacts, SamplingPolicy, decide, hash_unit
spec = json.loads(sys.stdin.read())
policy = SamplingPolicy.from_mapping(spec["policy"])
out = {"python_hash": hash("not-our-hash"), "units": [], "decisions": []}
for i, cid in enumerate(spec["ids"]):
    out["units"].append(hash_unit(cid, spec["policy"]["salt"]))
    f = ConversationFacts(cid, agent_id=f"agent-{i % 5}", tier=1 + i % 3, escalated=i % 11 == 0)
    out["decisions"].append(decide(policy, f).to_dict())
print(json.dumps(out))
"""


def _child_run(spec: dict[str, Any], seed: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_decisions_agree_across_processes_with_different_hash_seeds() -> None:
    ids = [f"conv-{i:04d}-{'x' * (i % 7)}" for i in range(1000)]
    policy_spec = {**TIERS_POLICY, "salt": "prod"}
    spec = {"policy": policy_spec, "ids": ids}
    policy = SamplingPolicy.from_mapping(policy_spec)
    local_units = [hash_unit(cid, "prod") for cid in ids]
    local = [
        decide(
            policy, facts(cid, agent_id=f"agent-{i % 5}", tier=1 + i % 3, escalated=i % 11 == 0)
        ).to_dict()
        for i, cid in enumerate(ids)
    ]
    a, b = _child_run(spec, "1"), _child_run(spec, "4242")
    assert a["python_hash"] != b["python_hash"]  # the seeds really differ: hash() would disagree
    for child in (a, b):
        assert child["units"] == local_units  # bit-identical floats through JSON
        assert child["decisions"] == local
    assert 0 < sum(d["by_rate"] for d in local) < 1000  # a real mix, not all-or-nothing


# --- rates per stratum ----------------------------------------------------------------------

rates = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0, allow_nan=False))


@pytest.mark.slow  # a statistical property over 40 examples (~4 s): make test, not make check
@settings(max_examples=40, deadline=None)
@given(r1=rates, r2=rates, r3=rates, salt=st.text(max_size=8), prefix=st.text(max_size=12))
def test_observed_rate_per_stratum_is_binomial(
    r1: float, r2: float, r3: float, salt: str, prefix: str
) -> None:
    policy = SamplingPolicy.from_mapping(
        {
            "default_rate": r3,
            "salt": salt,
            "strata": [{"tier": 1, "rate": r1}, {"agent": "a-*", "domain": "retail", "rate": r2}],
        }
    )
    n = 3000
    population = {
        "tier=1": [facts(f"{prefix}/1/{i}", agent_id="x", tier=1) for i in range(n)],
        "agent=a-*/domain=retail": [
            facts(f"{prefix}/2/{i}", agent_id="a-7", domain="retail") for i in range(n)
        ],
        "default": [facts(f"{prefix}/3/{i}", agent_id="x", tier=2) for i in range(n)],
    }
    for (name, members), rate in zip(population.items(), (r1, r2, r3), strict=True):
        decisions = [decide(policy, f) for f in members]
        assert {(d.stratum, d.rate, d.inclusion_probability) for d in decisions} == {
            (name, rate, rate)
        }
        hits = sum(d.sampled for d in decisions)
        assert all(d.sampled == d.by_rate for d in decisions)  # no rule fires here
        assert all(d.weight == (1.0 / rate if d.by_rate else None) for d in decisions)
        if rate in (0.0, 1.0):
            assert hits == n * rate  # exact, not statistical
        else:
            lo, hi = binom.interval(1 - 1e-9, n, rate)  # exact binomial, ~6 sigma two-sided
            assert lo <= hits <= hi, (name, rate, hits)


@settings(max_examples=50, deadline=None)
@given(a=st.floats(0.0, 1.0), b=st.floats(0.0, 1.0), cid=st.text(min_size=1, max_size=64))
def test_samples_are_nested_across_rates(a: float, b: float, cid: str) -> None:
    low, high = sorted((a, b))
    decide_at = [
        decide(SamplingPolicy(default_rate=r), facts(cid, agent_id="x")).by_rate
        for r in (low, high)
    ]
    assert decide_at[0] <= decide_at[1]  # sampled at the lower rate => sampled at the higher


# --- always-sample rules --------------------------------------------------------------------

NEVER = SamplingPolicy.from_mapping(
    {"default_rate": 0.0, "always_sample": {"confidence_floor": 0.5}}
)


@pytest.mark.parametrize(
    ("etype", "payload", "reason"),
    [
        ("escalation", {"trigger": "threshold"}, "escalation"),
        ("message", {"role": "assistant", "confidence": 0.49}, "low_confidence"),
        ("tool_result", {"ok": False, "error": "timeout"}, "failed_tool_call"),
        ("feedback", {"score": -0.2}, "negative_feedback"),
    ],
)
def test_each_always_sample_rule_fires(etype: str, payload: dict[str, Any], reason: str) -> None:
    sampler = ConversationSampler(NEVER, "c1")
    assert not sampler.observe(event("e0", "c1", "message", confidence=0.9)).sampled
    d = sampler.observe(event("e1", "c1", etype, at=5, **payload))
    assert d == SamplingDecision(
        sampled=True,
        by_rate=False,
        reasons=(reason,),
        stratum="default",
        rate=0.0,
        inclusion_probability=0.0,
        weight=None,
    )
    assert d.by_rule and d.estimation_weight() == 0.0
    assert d.estimation_weight("rule_stratum") == 1.0


@pytest.mark.parametrize(
    ("etype", "payload"),
    [
        ("message", {"role": "assistant", "confidence": 0.5}),  # at the floor: strict
        ("message", {"role": "user", "confidence": 0.1}),  # not an assistant message
        ("tool_result", {"ok": True}),
        ("feedback", {"score": 0.0}),  # zero is not negative
        ("outcome", {"success": False}),  # not a rule
    ],
)
def test_rules_do_not_fire_on_near_misses(etype: str, payload: dict[str, Any]) -> None:
    d = decide_events(NEVER, [event("e1", "c1", etype, **payload)])["c1"]
    assert not d.sampled and d.reasons == () and d.weight is None


def test_disabled_rules_do_not_fire() -> None:
    off = SamplingPolicy.from_mapping(
        {
            "default_rate": 0.0,
            "always_sample": {
                "escalation": False,
                "failed_tool_call": False,
                "negative_feedback_below": None,
            },
        }
    )
    evs = [
        event("e1", "c1", "escalation"),
        event("e2", "c1", "tool_result", ok=False),
        event("e3", "c1", "feedback", score=-1.0),
        event("e4", "c1", "message", confidence=0.0),
    ]
    assert not decide_events(off, evs)["c1"].sampled


def test_rate_and_rule_together_keep_the_design_weight() -> None:
    policy = SamplingPolicy.from_mapping({"default_rate": 0.5})
    cid = next(f"c{i}" for i in range(100) if hash_unit(f"c{i}") < 0.5)
    evs = [event("e1", cid, "tool_result", ok=False), event("e2", cid, "escalation", at=1)]
    d = decide_events(policy, evs)[cid]
    assert d.reasons == ("rate", "escalation", "failed_tool_call")
    assert d.by_rate and d.by_rule and d.weight == 2.0 and d.inclusion_probability == 0.5
    assert d.estimation_weight() == 2.0 and d.estimation_weight("rule_stratum") == 1.0
    assert SamplingDecision.from_dict(json.loads(json.dumps(d.to_dict()))) == d


def test_decision_changes_as_events_arrive_but_by_rate_does_not() -> None:
    policy = SamplingPolicy.from_mapping({"default_rate": 0.0})
    sampler = ConversationSampler(policy, "c9")
    first = sampler.observe(event("e1", "c9", "message", confidence=0.9))
    assert not first.sampled
    assert sampler.observe(event("e1", "c9", "message", confidence=0.9)) == first  # duplicate
    later = sampler.observe(event("e2", "c9", "escalation", at=3600))
    assert later.sampled and later.reasons == ("escalation",) and not later.by_rate
    with pytest.raises(ValueError, match="c9"):
        sampler.observe(event("e3", "other", "message"))


def _conversation_events() -> list[Any]:
    return [
        event("m1", "k", "message", at=0, agent="bot-a", context={"domain": "air", "tier": 1}),
        event("m2", "k", "message", at=1, agent="bot-b", context={"tier": 3}, confidence=0.1),
        event("t1", "k", "tool_result", at=2, ok=False, context=None),
        event("f1", "k", "feedback", at=9, score=-0.5),
        event("f2", "k", "feedback", at=10, score=0.9),
    ]


@settings(max_examples=60, deadline=None)
@given(order=st.permutations(range(5)), dupes=st.lists(st.integers(0, 4), max_size=4))
def test_facts_are_order_independent_and_idempotent(order: list[int], dupes: list[int]) -> None:
    evs = _conversation_events()
    shuffled = [evs[i] for i in order] + [evs[i] for i in dupes]
    got = decide_events(SamplingPolicy.from_mapping(TIERS_POLICY), shuffled)["k"]
    f = ConversationFacts("k")
    for ev in shuffled:
        f = f.observe(ev)
    # stratum attributes from the earliest event carrying each, whatever the arrival order
    assert (f.agent_id, f.domain, f.tier) == ("bot-a", "air", 1)
    assert (f.min_confidence, f.min_feedback, f.failed_tool_call) == (0.1, -0.5, True)
    assert got.stratum == "tier=1" and got.rate == 0.02
    assert got.reasons[-3:] == ("low_confidence", "failed_tool_call", "negative_feedback")


# --- strata and configuration ---------------------------------------------------------------


def test_most_specific_stratum_wins() -> None:
    policy = SamplingPolicy.from_mapping(
        {
            "default_rate": 0.3,
            "strata": [
                {"tier": 1, "rate": 0.02},
                {"agent": "billing-*", "tier": 1, "rate": 0.25},
                {"agent": "billing-eu", "tier": 1, "rate": 0.5, "name": "eu"},
                {"agent": "billing-*", "rate": 0.7},
                {"domain": "retail", "rate": 0.8},
                {"tier": 2, "rate": 0.9},
            ],
        }
    )
    cases = {
        ("support", None, 1): ("tier=1", 0.02),
        ("billing-us", None, 1): ("agent=billing-*/tier=1", 0.25),  # agent + tier > tier
        ("billing-eu", "retail", 1): ("eu", 0.5),  # literal agent > glob
        ("billing-us", None, 3): ("agent=billing-*", 0.7),
        ("Billing-us", None, 3): ("default", 0.3),  # globs are case-sensitive
        ("support", "retail", 2): ("domain=retail", 0.8),  # equal specificity: first declared
        (None, None, None): ("default", 0.3),
        (None, None, 1): ("tier=1", 0.02),  # unknown agent matches only agent="*"
    }
    for (agent, domain, tier), expected in cases.items():
        assert tuple(policy.stratum_for(agent, domain, tier)) == expected
        d = decide(policy, facts("c", agent_id=agent, domain=domain, tier=tier))
        assert (d.stratum, d.rate) == expected


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"strata": [{"tier": 1, "rate": 1.5}]}, "strata.0.rate: Input should be less than"),
        ({"strata": [{"rate": 0.1}, {"tier": 4, "rate": 0.1}]}, "strata.1.tier"),
        ({"strata": [{"tier": 1}]}, "strata.0.rate: Field required"),
        ({"default_rate": "0.5"}, "default_rate: Input should be a valid number"),
        ({"always_sample": {"confidence_floor": -0.1}}, "always_sample.confidence_floor"),
        ({"always_sample": {"escalate": True}}, "always_sample.escalate: Extra inputs"),
        ({"strata": [{"tier": 1, "rate": 0.1}, {"tier": 1, "rate": 0.2}]}, "strata.1: same"),
        ({"strata": [{"tier": 1, "rate": 0.1, "name": "default"}]}, "strata.0: stratum name"),
        ({"salt": "é" * 33}, "salt: at most 64"),
    ],
)
def test_invalid_policies_name_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(f"sampling: {message}")):
        SamplingPolicy.from_mapping(data)


def test_policy_from_yaml_and_digest() -> None:
    text = """
    default_rate: 0.05
    salt: v1
    strata:
      - {tier: 3, rate: 1}
      - {agent: "billing-*", tier: 1, rate: 0.25}
    always_sample: {confidence_floor: 0.4, negative_feedback_below: -0.5}
    """
    policy = SamplingPolicy.from_yaml(text)
    assert policy.stratum_for("billing-x", None, 1) == ("agent=billing-*/tier=1", 0.25)
    assert policy.always_sample.confidence_floor == 0.4
    assert policy.digest() == SamplingPolicy.from_yaml(text).digest()
    assert policy.digest() != SamplingPolicy.from_yaml(text.replace("v1", "v2")).digest()
    assert SamplingPolicy.from_yaml("") == SamplingPolicy()
    with pytest.raises(ConfigError, match=re.escape("policy.yaml:1: the top level must be a map")):
        SamplingPolicy.from_yaml("- 1", source="policy.yaml")
    bad = "default_rate: 0.5\nstrata:\n  - {tier: 3, rate: 1}\n  - {tier: 1, rate: 2}\n"
    with pytest.raises(ConfigError) as err:
        SamplingPolicy.from_yaml(bad, source="policy.yaml")
    assert str(err.value).startswith("policy.yaml:4: strata[1].rate: ")
    with pytest.raises(ConfigError, match="not valid YAML"):
        SamplingPolicy.from_yaml("a: [", source="policy.yaml")


# --- estimators -----------------------------------------------------------------------------

STRATA = [  # (tier, population size, rate, success probability)
    (3, 20_000, 1.0, 0.92),
    (2, 60_000, 0.10, 0.75),
    (1, 120_000, 0.02, 0.45),
]
POP_POLICY = {
    "default_rate": 0.0,
    "strata": [{"tier": t, "rate": r} for t, _, r, _ in STRATA],
}


def _population(scale: float, seed: int) -> list[tuple[ConversationFacts, float]]:
    """Conversations with outcome y; failures escalate far more often than successes."""
    rng = random.Random(seed)
    out = []
    for tier, size, _, p in STRATA:
        for i in range(int(size * scale)):
            y = 1.0 if rng.random() < p else 0.0
            escalated = rng.random() < (0.02 if y else 0.35)
            f = ConversationFacts(
                f"s{seed}-t{tier}-{i}", agent_id="bot", tier=tier, escalated=escalated
            )
            out.append((f, y))
    return out


@pytest.mark.slow  # seconds of waiting or sampling: make test, not make check
def test_weighted_estimate_is_unbiased_and_naive_mean_is_not() -> None:
    population = _population(1.0, seed=11)
    assert len(population) == 200_000
    true_mean = sum(y for _, y in population) / len(population)
    policy = SamplingPolicy.from_mapping(POP_POLICY)
    decisions = [decide(policy, f) for f, _ in population]
    ys = [y for _, y in population]
    sampled = [(d, y) for d, y in zip(decisions, ys, strict=True) if d.sampled]
    rule_only = [d for d, _ in sampled if not d.by_rate]
    assert len(rule_only) > 20_000  # the rules pull in many (mostly failed) conversations

    est = weighted_mean(ys, decisions)
    # analytic standard error of the stratified design, to check the estimator's own
    n_total = len(population)
    analytic = math.sqrt(
        sum((size / n_total) ** 2 * (1 - r) * p * (1 - p) / (size * r) for _, size, r, p in STRATA)
    )
    assert 0.8 < est.std_error / analytic < 1.25
    assert abs(est.weight_total - n_total) < 5 * 120_000 * math.sqrt(0.98 / 2400)
    assert abs(est.mean - true_mean) < 4 * est.std_error

    alt = weighted_mean(ys, decisions, mode="rule_stratum")
    assert alt.n == len(sampled) and alt.std_error < est.std_error  # uses every label
    assert abs(alt.mean - true_mean) < 4 * alt.std_error

    naive = sum(y for _, y in sampled) / len(sampled)
    assert abs(naive - true_mean) > 0.1 and abs(naive - true_mean) > 15 * est.std_error
    # the classic mistake: weighting rule-pulled conversations by 1 / rate as well
    wrong = sum(y / d.rate for d, y in sampled) / sum(1 / d.rate for d, _ in sampled)
    assert true_mean - wrong > 15 * est.std_error


@pytest.mark.slow  # seconds of waiting or sampling: make test, not make check
def test_estimates_average_to_the_truth_over_independent_draws() -> None:
    """Re-draw the sample with 40 salts: the mean estimate converges on the population mean."""
    population = _population(0.1, seed=5)
    ys = [y for _, y in population]
    true_mean = sum(ys) / len(ys)
    estimates: dict[str, list[float]] = {"probability_sample": [], "rule_stratum": []}
    naive: list[float] = []
    for k in range(40):
        policy = SamplingPolicy.from_mapping({**POP_POLICY, "salt": f"draw-{k}"})
        decisions = [decide(policy, f) for f, _ in population]
        for mode, values in estimates.items():
            values.append(weighted_mean(ys, decisions, mode=mode).mean)  # type: ignore[arg-type]
        picked = [y for d, y in zip(decisions, ys, strict=True) if d.sampled]
        naive.append(sum(picked) / len(picked))
    for values in estimates.values():
        avg = sum(values) / len(values)
        sd = math.sqrt(sum((v - avg) ** 2 for v in values) / (len(values) - 1))
        assert abs(avg - true_mean) < 4 * sd / math.sqrt(len(values))
    assert abs(sum(naive) / len(naive) - true_mean) > 0.1


def test_weighted_mean_edge_cases() -> None:
    policy = SamplingPolicy.from_mapping({"default_rate": 0.0})
    none = [decide(policy, facts(f"c{i}", escalated=True)) for i in range(3)]
    empty = weighted_mean([1.0, 0.0, 1.0], none)
    assert math.isnan(empty.mean) and empty.n == 0 and empty.weight_total == 0.0
    census = [decide(SamplingPolicy(), facts(f"c{i}")) for i in range(4)]
    full = weighted_mean([1.0, 0.0, 1.0, 1.0], census)
    assert (full.mean, full.std_error, full.n, full.weight_total) == (0.75, 0.0, 4, 4.0)
    with pytest.raises(ValueError):
        weighted_mean([1.0], census)
    with pytest.raises(ValueError, match="finite"):
        weighted_mean([math.nan] * 4, census)
