"""Domain policy rules on real tau2-bench conversations: each rule fires where the policy is
broken and stays quiet where it is kept; flags quote the clause, the call and the evidence.

Conversations come from ``tests/data/tau2`` and ``tests/data/tau2-results`` (public tau2-bench runs;
see the SOURCE/README files there). A rule that breaks on no real conversation of those is shown
firing on a real conversation with one value edited (``edited``: the call's arguments, a tool
result's field or a user turn), and quiet on the same conversation unedited.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from bench.policy_recall import compare, default_files, load, measure_part, refusals
from monitor.contract.events import AgentEvent
from monitor.judges.base import Conversation, Judge, Verdict
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.domains import Domain
from monitor.judges.offline import offline_judgements
from monitor.judges.policy.airline import airline_rules, current_time
from monitor.judges.policy.evaluate import RuleSet, evaluate
from monitor.judges.policy.retail import retail_rules
from monitor.judges.quality import ANY_JUDGE, judge_quality
from monitor.judges.runner import JudgeRunner

ROOT = Path(__file__).resolve().parents[2]
RETAIL_CONV = "tau2:f8442fc8-3b7a-4902-87f4-116e27b63fd7"  # exchange of two items, reward 1
RETAIL_EXCHANGE = f"{RETAIL_CONV}:16"


@cache
def conversations() -> dict[str, list[AgentEvent]]:
    paths = sorted((ROOT / "tests/data/tau2").glob("*.json"))
    return load(paths + sorted((ROOT / "tests/data/tau2-results").glob("*.json.gz")))


@cache
def domain(name: str) -> Domain:
    from monitor.judges import airline, retail

    return {
        "airline": airline.domain,
        "retail": retail.domain,
        "retail-opt-in": retail.opt_in,
        "airline-opt-in": airline.opt_in,
    }[name]()


def judge_of(rule: str) -> Judge:
    """The judge of ``rule``, default or opt-in."""
    name = rule.split(".")[0]
    judges = [*domain(name).judges, *domain(f"{name}-opt-in").judges]
    (judge,) = [j for j in judges if j.name == f"policy.{rule}"]
    return judge


def verdicts(rule: str, events: list[AgentEvent], only: str | None = None) -> list[Verdict]:
    judge = judge_of(rule)
    conv = Conversation.of(events)
    return judge.judge(conv) if only is None else judge.judge(conv, only=only)  # type: ignore[call-arg]


def edited(events: list[AgentEvent], event_id: str, **change: Any) -> list[AgentEvent]:
    """``events`` with event ``event_id`` changed: ``arguments`` (merged into its first tool
    call), ``name`` (of that call), ``fields`` (merged into its JSON tool output), ``ok``,
    ``text`` (a message's content)."""
    out = []
    for e in events:
        if e.event_id == event_id:
            if e.message is not None:
                msg = e.message
                calls = list(msg.tool_calls)
                if calls and ("arguments" in change or "name" in change):
                    first = calls[0]
                    calls[0] = first.model_copy(
                        update={
                            "name": change.get("name", first.name),
                            "arguments": {**first.arguments, **change.get("arguments", {})},
                        }
                    )
                content = change.get("text", msg.content)
                msg = msg.model_copy(update={"tool_calls": calls, "content": content})
                e = e.model_copy(update={"message": msg})
            elif e.tool_result is not None:
                tr = e.tool_result
                content = tr.content
                if "fields" in change:
                    content = json.dumps({**json.loads(tr.content or "{}"), **change["fields"]})
                ok = change.get("ok", tr.ok)
                tr = tr.model_copy(
                    update={"content": content, "ok": ok, "error": None if ok else "User not found"}
                )
                e = e.model_copy(update={"tool_result": tr})
        out.append(e)
    return out


def labels(vs: list[Verdict]) -> list[int | None]:
    return [v.label for v in vs]


# -- the rule sets as data ---------------------------------------------------------------------


@pytest.mark.parametrize("name,build", [("airline", airline_rules), ("retail", retail_rules)])
def test_every_clause_is_quoted_from_the_policy(name: str, build: Any) -> None:
    policy = (files("monitor.judges") / f"domain_data/{name}/policy.md").read_text("utf-8")
    rules = build(policy)
    assert len({r.id for r in rules}) == len(rules) >= 12
    for rule in rules:
        assert rule.id.startswith(f"{name}.") and rule.clause in policy, rule.id
        assert rule.judge_name == f"policy.{rule.id}"
    assert {j.name for j in domain(name).judges} == {f"policy.{r.id}" for r in rules if r.default}
    opt_in = {f"policy.{r.id}" for r in rules if not r.default}
    if name == "retail":  # the process rules that do not predict a failed run (module docstring)
        assert opt_in == {
            f"policy.retail.{r}" for r in ("authentication", "confirmation", "one_action")
        }
    else:  # below the precision floor on the runs held apart from its development
        assert opt_in == {"policy.airline.compensation.amount"}
    assert {j.name for j in domain(f"{name}-opt-in").judges} == opt_in
    assert not domain(f"{name}-opt-in").references


def test_current_time_comes_from_the_policy_text() -> None:
    policy = (files("monitor.judges") / "domain_data/airline/policy.md").read_text("utf-8")
    assert current_time(policy).isoformat() == "2024-05-15T15:00:00"  # type: ignore[union-attr]
    assert current_time("no time here") is None


def test_pyproject_registers_the_retail_domain() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'retail = "monitor.judges.retail:domain"' in text
    assert 'airline = "monitor.judges.airline:domain"' in text


# -- real conversations where a rule fires, and where it does not -----------------------------

FIRES = [
    # rule, conversation, message, what the rationale says
    (
        "airline.cancel.eligibility",
        "tau2:251f444a-b9ae-44c5-b7b7-b2d6e3430185",
        12,
        "booked 2024-05-01T05:17:41 (over 24 h before 2024-05-15 15:00:00), cabin basic_economy",
    ),
    (
        "airline.compensation.amount",
        "tau2:490c52db-ca24-4f6f-b483-8666a362451f",
        19,
        "certificate of $200 for 1 passenger(s)",
    ),
    (
        "airline.compensation.eligibility",
        "tau2:490c52db-ca24-4f6f-b483-8666a362451f",
        19,
        "compensates a regular member without insurance in economy",
    ),
    (
        "airline.confirmation",
        "tau2:17e19956-3d37-4ddf-b1c7-b24bd9756eb7",
        2,
        "called without an explicit yes",
    ),
    (
        "airline.modify.basic_economy",
        "tau2:0db652e1-a08f-4746-a3ef-afa0cf16e8d7",
        22,
        "changes the flights of a basic economy reservation to HAT041 2024-05-21",
    ),
    (
        "airline.one_action",
        "tau2:490c52db-ca24-4f6f-b483-8666a362451f",
        19,
        "2 tool calls in one message (cancel_reservation, send_certificate)",
    ),
    # retail: an order this conversation already returned / changed, then acted on again (the
    # tool refuses, but the one action the order allowed is spent; both runs failed)
    (
        "retail.exchange.delivered",
        "tau2:d33ad19c-10c9-4178-8222-30dcc4cf400d",
        22,
        "status is 'return requested' (after this conversation's return_delivered_order_items)",
    ),
    (
        "retail.modify.pending",
        "tau2:6a793eb0-324b-4cbe-937b-8bb2db33791e",
        26,
        "'pending (item modified)' (after this conversation's modify_pending_order_items)",
    ),
    (
        "retail.return.delivered",
        "tau2:e7d583ab-b1ad-4c6c-af1a-e32fd2d953e7",
        26,
        "status is 'exchange requested' (after this conversation's",
    ),
    # an exchange of an item for itself (the run failed)
    (
        "retail.item.same_product",
        "tau2:0d7da054-9acd-4700-aafd-461aaa554f92",
        25,
        "item 9494281769 is 'changed' to itself",
    ),
    # retail opt-in rules
    (
        "retail.confirmation",
        "tau2:a3ee8637-a131-4604-a91e-0d7e08e64734",
        11,
        "called without an explicit yes",
    ),
    (
        "retail.one_action",
        "tau2:9914829a-0c08-4cdc-87b2-861f68c33ea3",
        20,
        "4 tool calls in one message",
    ),
    (
        "retail.authentication",
        "tau2:2bbcd19e-2064-455b-9719-8d30a7b28b7d",
        6,
        "never located by email or name + zip",
    ),
    (
        "airline.transfer.passenger_count",
        "tau2:0be07113-bb6a-432a-aa71-56f11a6d057a",
        16,
        "transfers a change of the number of passengers",
    ),
]
QUIET = [
    ("airline.cancel.eligibility", "tau2:582fffc6-3e37-457c-a2dd-8e109b14c62c"),
    # insured, and the user "feels unwell": a covered reason
    ("airline.cancel.eligibility", "tau2:9c22177a-433f-478a-81e3-b19497cb5a29"),
    ("airline.cancel.eligibility", "tau2:05a60bc6-d508-45f6-9908-debde01e6787"),
    ("airline.cancel.eligibility", "tau2:264b4be5-666f-4acc-80ed-f692a1252ea8"),
    ("airline.cancel.eligibility", "tau2:34dcb9e6-a211-424e-9040-c7099286f781"),
    ("airline.compensation.amount", "tau2:bba0f089-e0b6-4095-bd5b-fc9d0f3a8fe4"),
    ("airline.compensation.eligibility", "tau2:bba0f089-e0b6-4095-bd5b-fc9d0f3a8fe4"),
    ("airline.compensation.asked", "tau2:bba0f089-e0b6-4095-bd5b-fc9d0f3a8fe4"),
    ("airline.confirmation", "tau2:80f58ded-e863-49c4-b052-a013e1d92fc8"),
    ("airline.modify.basic_economy", "tau2:2675f4f4-afa7-4849-86f3-27ede43ea2de"),
    ("airline.modify.payment", "tau2:2675f4f4-afa7-4849-86f3-27ede43ea2de"),
    ("airline.cabin.flown", "tau2:2675f4f4-afa7-4849-86f3-27ede43ea2de"),
    ("airline.one_action", "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4"),
    ("airline.bags.allowance", "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4"),
    ("airline.book.passengers", "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4"),
    ("airline.book.payment_limits", "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4"),
    ("airline.payment.in_profile", "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4"),
    ("airline.bags.no_removal", "tau2:42904288-540d-49f6-94b7-b7e60d54c252"),
    ("airline.passengers.count", "tau2:e85f9d3e-1861-4298-ace2-4d54a899227c"),
    # an address change after the items were modified: tau2's tools and tasks allow it
    ("retail.modify.pending", "tau2:ccd1d8d2-8826-4d14-b126-c900d7f51a1e"),
    # the first item change was refused ("Error: ..." in an output not marked as an error)
    ("retail.items.once", "tau2:a993cf77-ab8f-4bac-8778-02236838cfc0"),
    *[
        (f"retail.{r}", "tau2:fd4312b5-b7dc-4fed-bb24-6c02b0829ced")
        for r in (
            "return.delivered",
            "cancel.pending",
            "cancel.reason",
            "return.refund_method",
            "payment.in_profile",
        )
    ],
    ("retail.payment.change", "tau2:72aca393-5b24-4b40-ae85-82ccae5bf526"),
    *[
        (f"retail.{r}", RETAIL_CONV)
        for r in (
            "authentication",
            "confirmation",
            "exchange.delivered",
            "item.same_product",
            "items.once",
            "one_action",
        )
    ],
]


@pytest.mark.parametrize("rule,cid,n,says", FIRES)
def test_rule_fires_on_a_real_violation(rule: str, cid: str, n: int, says: str) -> None:
    events = conversations()[cid]
    vs = verdicts(rule, events)
    flagged = [v for v in vs if v.label == 0]
    v = next(v for v in flagged if v.item_id == f"{cid}:{n}")
    assert v.judge == f"policy.{rule}" and v.status == "ok" and v.categories
    assert says in (v.rationale or "")
    # the flag names the clause, the call and its evidence (real events of the conversation)
    clause = v.evidence["clause"]
    assert v.evidence["rule"] == rule and f'(policy: "{clause}")' in (v.rationale or "")
    message = next(e for e in events if e.event_id == v.item_id)
    assert message.message is not None
    call_ids = {c.id for c in message.message.tool_calls}
    assert {c["call_id"] for c in v.evidence["calls"]} <= call_ids
    ids = {e.event_id for e in events}
    assert all(ev["event_id"] in ids for ev in v.evidence["evidence"])


@pytest.mark.parametrize("rule,cid", QUIET)
def test_rule_is_quiet_where_the_policy_is_kept(rule: str, cid: str) -> None:
    vs = verdicts(rule, conversations()[cid])
    assert vs and set(labels(vs)) == {1}, [v.rationale for v in vs]


REJECTED = [
    # rule, conversation, message whose call the tool refused, what the gate's rationale says
    (
        "airline.modify.payment",
        "tau2:a8c76d9a-aebf-4976-9715-9e26f7a5bae5",
        22,
        "pays the flight change with travel certificate certificate_7473723",
    ),
    (
        "retail.exchange.delivered",
        "tau2:a16e7412-a497-43eb-b61c-afd7bbe11f20",
        23,
        "exchanges an order whose status is 'pending'",
    ),
    (
        "retail.cancel.pending",
        "tau2:582f048c-3c6f-4021-9a7d-b10e0475cad3",
        32,
        "cancels an order whose status is 'processed'",
    ),
    (
        "retail.payment.in_profile",
        "tau2:e7d583ab-b1ad-4c6c-af1a-e32fd2d953e7",
        21,
        "gift_card_0000000 is not in the user's profile",
    ),
    (
        "retail.return.refund_method",
        "tau2:151ab678-015e-4b1d-824b-8e30afc5d274",
        18,
        "refunds to paypal_9497703: neither the original method credit_card_3124723",
    ),
    (
        "retail.item.same_product",
        "tau2:9063871b-f44e-47fb-9aee-0b2be474c669",
        18,
        "3 items for 0 new items",
    ),
    # the order's latest state came from this conversation's address change, but its status
    # 'pending' did not: not spent by the conversation's own write
    (
        "retail.exchange.delivered",
        "tau2:33c47056-5073-4c0e-824f-0adf5a2203f9",
        25,
        "exchanges an order whose status is 'pending'",
    ),
]


@pytest.mark.parametrize("rule,cid,n,says", REJECTED)
def test_a_call_the_tool_refused_is_no_verdict_but_the_gate_stops_it(
    rule: str, cid: str, n: int, says: str
) -> None:
    events = conversations()[cid]
    target = f"{cid}:{n}"
    # the judge: the refused call changed nothing, so no flag (another call of the message may
    # still get its own passing verdict)
    assert [v for v in verdicts(rule, events) if v.item_id == target and v.label != 1] == []
    judge = judge_of(rule)
    found = [
        f
        for f in judge.ruleset.findings(Conversation.of(events))  # type: ignore[attr-defined]
        if f.rule.id == rule and f.message.event_id == target and not f.check.ok
    ]
    assert found and all(f.rejected for f in found)
    # the gate asks before the call runs: the conversation up to that message, only= it
    upto = events[: next(i for i, e in enumerate(events) if e.event_id == target) + 1]
    (v,) = verdicts(rule, upto, only=target)
    assert v.label == 0 and says in (v.rationale or "")


def test_evidence_of_a_flag_quotes_the_tool_result() -> None:
    cid = "tau2:251f444a-b9ae-44c5-b7b7-b2d6e3430185"
    v = next(
        v for v in verdicts("airline.cancel.eligibility", conversations()[cid]) if v.label == 0
    )
    (ev,) = v.evidence["evidence"]
    assert ev["kind"] == "tool_result" and ev["tool"] == "get_reservation_details"
    assert "created 2024-05-01T05:17:41" in ev["excerpt"] and "insurance no" in ev["excerpt"]
    assert v.evidence["calls"][0]["name"] == "cancel_reservation"


def test_transfer_rule_says_nothing_on_other_transfers() -> None:
    cid = next(
        c
        for c, evs in conversations().items()
        if "d82da758" not in c
        and any(
            e.message
            and any(t.name == "transfer_to_human_agents" for t in e.message.tool_calls)
            and "passenger"
            not in " ".join(
                (x.message.content or "") for x in evs if x.message and x.message.role == "user"
            ).lower()
            for e in evs
        )
    )
    assert verdicts("airline.transfer.passenger_count", conversations()[cid]) == []


# -- rules no real run breaks: a real conversation with one value edited ---------------------

AIRLINE_EDITS = [
    (
        "airline.bags.allowance",
        "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4",
        26,
        {"arguments": {"nonfree_baggages": 1}},
        "1 non-free of 0 bags",
    ),
    (
        "airline.book.passengers",
        "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4",
        26,
        {"arguments": {"passengers": [{"first_name": f"P{i}"} for i in range(6)]}},
        "books 6 passengers",
    ),
    (
        "airline.book.payment_limits",
        "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4",
        26,
        {
            "arguments": {
                "payment_methods": [
                    {"payment_id": "credit_card_1"},
                    {"payment_id": "credit_card_2"},
                ]
            }
        },
        "2 credit_cards (at most 1)",
    ),
    (
        "airline.payment.in_profile",
        "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4",
        26,
        {"arguments": {"payment_methods": [{"payment_id": "credit_card_0000000"}]}},
        "credit_card_0000000 is not in the user's profile",
    ),
    (
        "airline.passengers.count",
        "tau2:e85f9d3e-1861-4298-ace2-4d54a899227c",
        10,
        {"arguments": {"passengers": [{"first_name": "A", "last_name": "B", "dob": "1990-01-01"}]}},
        "changes the number of passengers from 2 to 1",
    ),
]


@pytest.mark.parametrize("rule,cid,n,change,says", AIRLINE_EDITS)
def test_rule_fires_on_an_edited_call(
    rule: str, cid: str, n: int, change: dict[str, Any], says: str
) -> None:
    events = conversations()[cid]
    target = f"{cid}:{n}"
    assert any(v.item_id == target and v.label == 1 for v in verdicts(rule, events))
    bad = edited(events, target, **change)
    flagged = [v for v in verdicts(rule, bad) if v.label == 0]
    assert [v.item_id for v in flagged] == [target] and says in (flagged[0].rationale or "")


def details_for_call(events: list[AgentEvent], event_id: str) -> AgentEvent:
    """The ``get_reservation_details`` result for the reservation that the tool call in event
    ``event_id`` names."""
    call = next(e for e in events if e.event_id == event_id)
    assert call.message is not None
    rid = call.message.tool_calls[0].arguments["reservation_id"]
    return next(
        e
        for e in events
        if e.tool_result
        and e.tool_result.name == "get_reservation_details"
        and f'"reservation_id": "{rid}"' in (e.tool_result.content or "")
    )


def test_bags_cannot_be_removed_edited_reservation() -> None:
    cid = "tau2:42904288-540d-49f6-94b7-b7e60d54c252"
    events = conversations()[cid]
    details = details_for_call(events, f"{cid}:18")
    bad = edited(events, details.event_id, fields={"total_baggages": 3})
    (v,) = [v for v in verdicts("airline.bags.no_removal", bad) if v.label == 0]
    assert "lowers the checked bags from 3 to 2" in (v.rationale or "")
    assert v.evidence["evidence"][0]["event_id"] == details.event_id


def test_cabin_change_after_a_flown_flight_edited_reservation() -> None:
    cid = "tau2:2675f4f4-afa7-4849-86f3-27ede43ea2de"
    events = conversations()[cid]
    details = details_for_call(events, f"{cid}:20")
    res = json.loads(details.tool_result.content or "")  # type: ignore[union-attr]
    assert res["cabin"] == "business"  # the call changes it to economy
    flights = [{**f, "date": "2024-05-01"} for f in res["flights"]]
    bad = edited(events, details.event_id, fields={"flights": flights})
    (v,) = [v for v in verdicts("airline.cabin.flown", bad) if v.label == 0]
    assert "changes the cabin to economy though flight HAT227 on 2024-05-01" in (v.rationale or "")


def test_compensation_nobody_asked_for_edited_user_turns() -> None:
    cid = "tau2:bba0f089-e0b6-4095-bd5b-fc9d0f3a8fe4"
    events = conversations()[cid]
    for e in events:
        if e.message is not None and e.message.role == "user":
            events = edited(events, e.event_id, text="My flight was late.")
    (v,) = verdicts("airline.compensation.asked", events)
    assert v.label == 0 and "never asked for" in (v.rationale or "")


RETAIL_EDITS = [
    # rule, edits of the exchange call (or of the order), what the rationale says
    ("retail.exchange.delivered", {"fields": {"status": "pending"}}, "order", "'pending'"),
    (
        "retail.item.same_product",
        {"arguments": {"new_item_ids": ["7747408585", "7706410293"]}},
        "call",
        "becomes 7747408585 of product 4896585277",
    ),
    (
        "retail.cancel.reason",
        {"name": "cancel_pending_order", "arguments": {"reason": "changed my mind"}},
        "call",
        "cancels with the reason 'changed my mind'",
    ),
    (
        "retail.cancel.pending",
        {"name": "cancel_pending_order", "arguments": {"reason": "no longer needed"}},
        "call",
        "cancels an order whose status is 'delivered'",
    ),
    (
        "retail.modify.pending",
        {"name": "modify_pending_order_address"},
        "call",
        "modifies an order whose status is 'delivered'",
    ),
    ("retail.return.delivered", {"fields": {"status": "processed"}}, "order", "'processed'"),
    (
        "retail.return.refund_method",
        {"name": "return_delivered_order_items", "arguments": {"payment_method_id": "paypal_1"}},
        "call",
        "refunds to paypal_1: neither the original method",
    ),
    (
        "retail.payment.change",
        {
            "name": "modify_pending_order_payment",
            "arguments": {"payment_method_id": "credit_card_9513926"},
        },
        "call",
        "'changes' the payment to the original method credit_card_9513926",
    ),
    (
        "retail.confirmation",
        {"text": "I want the keyboard swapped."},
        "user",
        "called without an explicit yes",
    ),
    ("retail.authentication", {"ok": False}, "auth", "never located by email or name + zip"),
]


def _retail_target(where: str) -> str:
    events = conversations()[RETAIL_CONV]
    if where == "call":
        return RETAIL_EXCHANGE
    if where == "user":
        return [e.event_id for e in events if e.message and e.message.role == "user"][-2]
    name = "get_order_details" if where == "order" else "find_user_id_by_name_zip"
    return next(e.event_id for e in events if e.tool_result and e.tool_result.name == name)


@pytest.mark.parametrize("rule,change,where,says", RETAIL_EDITS)
def test_retail_rule_fires_on_an_edited_conversation(
    rule: str, change: dict[str, Any], where: str, says: str
) -> None:
    events = conversations()[RETAIL_CONV]
    assert not [v for v in verdicts(rule, events) if v.label == 0]
    bad = edited(events, _retail_target(where), **change)
    if rule == "retail.return.delivered":  # the exchange, as a return of the same items
        bad = edited(bad, RETAIL_EXCHANGE, name="return_delivered_order_items")
    flagged = [v for v in verdicts(rule, bad) if v.label == 0]
    assert [v.item_id for v in flagged] == [RETAIL_EXCHANGE], [v.rationale for v in flagged]
    assert says in (flagged[0].rationale or "")


def test_retail_items_once_and_one_action_on_a_repeated_exchange() -> None:
    events = conversations()[RETAIL_CONV]
    exchange = next(e for e in events if e.event_id == RETAIL_EXCHANGE)
    assert exchange.message is not None
    result = next(
        e
        for e in events
        if e.tool_result and e.tool_result.call_id == exchange.message.tool_calls[0].id
    )
    call = exchange.message.tool_calls[0]
    again = exchange.model_copy(
        update={
            "event_id": f"{RETAIL_CONV}:90",
            "ts": events[-1].ts,
            "message": exchange.message.model_copy(
                update={
                    "tool_calls": [
                        call.model_copy(update={"id": "x2"}),
                        call.model_copy(update={"id": "x3"}),
                    ]
                }
            ),
        }
    )
    bad = [*events, again]
    (once,) = [v for v in verdicts("retail.items.once", bad) if v.label == 0]
    assert once.item_id == again.event_id and "a second time for order #W2378156" in (
        once.rationale or ""
    )
    assert once.evidence["evidence"][0]["event_id"] == result.event_id
    (one,) = [v for v in verdicts("retail.one_action", bad) if v.label == 0]
    assert one.item_id == again.event_id and "2 tool calls in one message" in (one.rationale or "")


def test_retail_payment_in_profile_reads_the_user_details() -> None:
    events = conversations()[RETAIL_CONV]
    auth = next(
        e for e in events if e.tool_result and e.tool_result.name == "find_user_id_by_name_zip"
    )
    assert verdicts("retail.payment.in_profile", events) == []  # no profile fetched: no opinion
    profile = {"user_id": "yusuf_rossi_9620", "payment_methods": {"paypal_1": {"source": "paypal"}}}
    with_profile = [
        e.model_copy(
            update={
                "tool_result": e.tool_result.model_copy(
                    update={"name": "get_user_details", "content": json.dumps(profile)}
                )
            }
        )
        if e.event_id == auth.event_id and e.tool_result
        else e
        for e in events
    ]
    (v,) = verdicts("retail.payment.in_profile", with_profile)
    assert v.label == 0 and "credit_card_9513926 is not in the user's profile (paypal_1)" in (
        v.rationale or ""
    )


# -- the evaluator ---------------------------------------------------------------------------


def test_missing_data_is_no_verdict_and_a_broken_rule_is_an_error_verdict() -> None:
    from monitor.judges.policy.rule import Check, Rule

    cid = "tau2:251f444a-b9ae-44c5-b7b7-b2d6e3430185"
    conv = Conversation.of(conversations()[cid])

    def boom(*_: Any) -> Check:
        raise KeyError("oops")

    rules = [
        Rule("x.skip", frozenset(), (), "c", lambda *_: Check.skip()),
        Rule("x.boom", frozenset({"cancel_reservation"}), (), "c", boom),
    ]
    skip, broken = RuleSet("x", rules, "test").judges()
    assert skip.judge(conv) == []
    (err,) = broken.judge(conv)
    assert err.status == "error" and "KeyError" in (err.error or "")
    assert [f.rule.id for f in evaluate(rules[:1], conv)] == []


def test_only_gives_the_verdicts_on_that_message_alone() -> None:
    cid = "tau2:490c52db-ca24-4f6f-b483-8666a362451f"
    conv = Conversation.of(conversations()[cid])
    for judge in domain("airline").judges:
        full = judge.judge(conv)
        for item in {v.item_id for v in full}:
            assert judge.judge(conv, only=item) == [v for v in full if v.item_id == item]  # type: ignore[call-arg]


def test_any_judge_row_counts_labelling_judges_only() -> None:
    runner = JudgeRunner(deterministic_judges(), domains={"airline": domain("airline")})
    airline_runs = [
        events
        for events in conversations().values()
        if Conversation.of(events).domain() == "airline"
    ]
    rows = judge_quality(offline_judgements(airline_runs, runner.judges_for))
    by = {(r.judge, r.category): r for r in rows}
    anyj = by[(ANY_JUDGE, None)]
    # the judges whose precision's interval clears 0.7 on these runs: two rules with 25/25 and
    # 41/42 right; det.unsupported_figure (0.47) and the rules with a few flags do not
    labelling = {r.judge for r in rows if r.category is None and r.labels}
    assert labelling == {
        "policy.airline.cancel.eligibility",
        "policy.airline.transfer.passenger_count",
    }
    assert anyj.precision.value is not None and anyj.precision.value >= 0.95
    assert anyj.recall.value is not None and anyj.recall.value >= 0.3
    cancel = by[("policy.airline.cancel.eligibility", None)]
    assert cancel.true_pos >= 20 and cancel.precision.value >= 0.8  # type: ignore[operator]


def test_a_user_whose_profile_was_not_fetched_is_not_judged_against_another() -> None:
    cid = "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4"
    target = f"{cid}:26"
    before = verdicts("airline.payment.in_profile", conversations()[cid])
    assert [(v.item_id, v.label) for v in before] == [(target, 1)]
    events = edited(conversations()[cid], target, arguments={"user_id": "someone_else_1"})
    assert verdicts("airline.payment.in_profile", events) == []


def test_retail_rules_flag_what_the_tau2_retail_tools_refuse() -> None:
    """Gate-style (a call judged before it runs), the retail rules flag the writes tau2's own
    retail tools then refuse, and little else; airline tools accept what the rules flag."""
    by: dict[str, list[list[AgentEvent]]] = {}
    for events in conversations().values():
        by.setdefault(Conversation.of(events).domain() or "", []).append(events)
    retail_gate = refusals(by["retail"], domain("retail").judges)
    assert retail_gate["precision"].k >= 30 and retail_gate["precision"].value >= 0.85  # type: ignore[operator]
    assert retail_gate["recall"].value >= 0.7  # type: ignore[operator]
    airline_gate = refusals(by["airline"], domain("airline").judges)
    assert airline_gate["precision"].value <= 0.1  # type: ignore[operator]


def test_a_rule_below_the_floor_on_the_runs_held_apart_is_opt_in() -> None:
    """The runs held apart from the rules' development (other agents' airline runs) are new
    conversations; every default rule whose precision there falls below the floor is opt-in,
    and it is the one the benchmark names (docs/benchmarks.md)."""
    from monitor.judges import airline

    files = default_files()
    held = load(files["held apart"])
    assert len(held) == 230 and not set(held) & set(load(files["development"]))
    runner = JudgeRunner(deterministic_judges(), domains={"airline": airline.domain()})
    got = measure_part(list(held.values()), runner, tuple(airline.opt_in().judges))
    assert (got["conversations"], got["failed"]) == (230, 119)
    rules = [r for r in compare({"held apart": got}) if r["judge"].startswith("policy.")]
    below = {r["judge"] for r in rules if r["below_floor_held_apart"]}
    assert below == {"policy.airline.compensation.amount"}
    assert all(r["opt_in"] == (r["judge"] in below) for r in rules)
