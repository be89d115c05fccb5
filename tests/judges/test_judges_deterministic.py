"""Deterministic judges: built conversations for each case, then the real tau2 runs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from monitor.contract.events import AgentEvent
from monitor.judges.base import ALL_CATEGORIES, Conversation, Judge, Verdict
from monitor.judges.deterministic import (
    AuthorizationFabricationJudge,
    IgnoredToolErrorJudge,
    RepeatedToolCallJudge,
    UnsupportedFigureJudge,
    canonical_arguments,
    deterministic_judges,
    run_all,
)
from monitor.judges.figures import extract_figures, normalise_amount
from monitor.judges.lexicon import find_claims, tool_backs
from monitor.replay.tau2 import tau2_file_events
from tests.factories import event


class Conv:
    """Builds one conversation event by event (ids e0, e1, ... one second apart)."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []

    def _add(self, etype: str, **payload: Any) -> str:
        eid = f"e{len(self.events)}"
        self.events.append(event(eid, "c1", etype, at=len(self.events), **payload))
        return eid

    def user(self, text: str) -> str:
        return self._add("message", role="user", content=text, confidence=None)

    def say(self, text: str | None, *calls: tuple[str, str, dict[str, Any]]) -> str:
        tool_calls = [{"id": i, "name": n, "arguments": a} for i, n, a in calls]
        return self._add("message", role="assistant", content=text, tool_calls=tool_calls)

    def result(self, call_id: str, name: str, content: str = "{}", ok: bool = True) -> str:
        error = None if ok else content
        return self._add(
            "tool_result", call_id=call_id, name=name, ok=ok, content=content, error=error
        )

    def conv(self) -> Conversation:
        return Conversation.of(self.events)


def _one(verdicts: list[Verdict], item: str) -> Verdict:
    found = [v for v in verdicts if v.item_id == item]
    assert len(found) == 1, verdicts
    return found[0]


# --- authorization fabrication ---------------------------------------------------------------


def test_claim_without_any_tool_call_is_fabrication() -> None:
    c = Conv()
    c.user("Please cancel reservation EHGLP3.")
    c.say(None, ("k0", "get_reservation_details", {"reservation_id": "EHGLP3"}))
    c.result("k0", "get_reservation_details", '{"status": "confirmed"}')
    m = c.say("Done! Your reservation EHGLP3 has been cancelled.")
    v = _one(AuthorizationFabricationJudge().judge(c.conv()), m)
    assert (v.label, v.score, v.status) == (0, 0.0, "ok")
    assert v.categories == ("fabrication", "fabrication:authorization")
    assert v.evidence["message_event_id"] == m
    assert v.evidence["unsupported_families"] == ["cancel"]
    assert v.evidence["claims"][0]["phrase"] == "has been cancelled"


def test_claim_backed_by_successful_matching_call_passes_with_evidence() -> None:
    c = Conv()
    c.say(None, ("k1", "cancel_reservation", {"reservation_id": "EHGLP3"}))
    r = c.result("k1", "cancel_reservation", '{"status": "cancelled"}')
    m = c.say("Your reservation has been cancelled and the refund has been issued.")
    v = _one(AuthorizationFabricationJudge().judge(c.conv()), m)
    assert v.label == 1 and v.categories == ()
    fams = {x["family"]: x["supported_by"] for x in v.evidence["claims"]}
    assert set(fams) == {"cancel", "refund"}  # refund is backed by the cancellation
    assert fams["cancel"] == [{"call_id": "k1", "name": "cancel_reservation", "result_event_id": r}]


@pytest.mark.parametrize(
    ("tool", "ok", "claim", "label"),
    [
        ("cancel_reservation", False, "I have cancelled your booking.", 0),  # the call failed
        ("get_reservation_details", True, "Your flight has been booked.", 0),  # read-only
        ("book_reservation", True, "Your flight has been successfully booked!", 1),
        ("update_address", True, "Your address is now updated.", 1),
        ("modify_pending_order_address", True, "I've changed the shipping address.", 1),
        ("update_reservation_flights", True, "Your address has been updated.", 0),
        ("exchange_delivered_order_items", True, "Your items have been exchanged.", 1),
        ("return_delivered_order_items", True, "I have issued a refund to your card.", 1),
        ("send_certificate", True, "A $50 certificate has been sent to your account.", 1),
        ("book_reservation", True, "A note has been added to your reservation.", 0),
        # retail: an item change pays or refunds the difference; an order write backs "order"
        ("modify_pending_order_items", True, "The difference has been refunded to you.", 1),
        ("exchange_delivered_order_items", True, "The difference has been refunded.", 1),
        ("return_delivered_order_items", True, "Your order has been processed.", 1),
        ("modify_pending_order_items", True, "Your lamp has been exchanged.", 1),
        ("get_order_details", True, "Your order has been processed.", 0),  # read-only
        # airline: a cheaper cabin or flight refunds the difference; passive "you" is a claim
        ("update_reservation_flights", True, "A refund of $2492 has been processed.", 1),
        ("get_reservation_details", True, "You have been refunded $6,594.", 0),
    ],
)
def test_claim_matching_by_family(tool: str, ok: bool, claim: str, label: int) -> None:
    c = Conv()
    c.say(None, ("k1", tool, {"id": "X"}))
    c.result("k1", tool, "{}" if ok else "Error: not allowed", ok=ok)
    m = c.say(claim)
    assert _one(AuthorizationFabricationJudge().judge(c.conv()), m).label == label


@pytest.mark.parametrize(
    "text",
    [
        "I can cancel this reservation for you.",
        "Would you like me to cancel the booking?",
        "Has your booking been cancelled?",
        "Once I cancel it, the refund will be issued within 5 to 7 business days.",
        "If it has been cancelled by mistake, let me know.",
        "I will now send a $50 travel certificate to your account.",
        "It appears that travel insurance was not added to your booking.",
        "Your flight was cancelled by the airline last week.",
        "Your flight has been cancelled by the airline.",
        "I have checked your reservation and found two flights.",
        "To confirm, you want me to cancel reservation XEHM4B and refund it?",
        "The refund will be processed to your original payment method.",
        # checks, someone else's act, the user's consent and negations
        "I've confirmed that you are a Gold member, entitled to 3 free checked bags.",
        "I have confirmed that all flights in reservation Q69X3R are in the future.",
        "I've completed the search for direct flights from EWR to LAX.",
        "You've confirmed that you do not want to purchase travel insurance.",
        "There is no indication that the airline has cancelled the flight.",
        "None of your reservations appear to have been canceled this month.",
    ],
)
def test_offers_questions_plans_and_history_are_not_claims(text: str) -> None:
    assert find_claims(text) == []
    c = Conv()
    c.say(text)
    assert AuthorizationFabricationJudge().judge(c.conv()) == []


def test_claim_in_the_same_message_as_its_call_is_not_backed() -> None:
    c = Conv()
    m = c.say("Your booking has been cancelled.", ("k1", "cancel_reservation", {"id": "A1"}))
    c.result("k1", "cancel_reservation")
    assert _one(AuthorizationFabricationJudge().judge(c.conv()), m).label == 0


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("Your shipping addre\u017f\u017f has been updated.", "addre\u017f\u017f"),  # long s
        ("I have updated the ADDRE\u017f\u017f on file.", "ADDRE\u017f\u017f"),
        ("The \u0130TEM has been exchanged.", "\u0130TEM"),  # dotted capital I
    ],
)
def test_words_a_pattern_matches_beyond_ascii_find_their_family(text: str, word: str) -> None:
    """A word the case-insensitive patterns match though ``lower()`` does not spell it (the
    long s matches ``s``; ``casefold`` changes the length): the claim of its family, and the
    judge's verdict an ordinary failure, not an error."""
    family = "address" if "ddre" in word.lower() else "exchange"
    claims = find_claims(text)
    assert [(c.family, word in c.sentence) for c in claims] == [(family, True)]
    c = Conv()
    c.user("Please change my address.")
    c.say(None, ("k0", "get_user_details", {"user_id": "u1"}))
    c.result("k0", "get_user_details", '{"address": "1 Main St"}')
    m = c.say(text)
    v = _one(AuthorizationFabricationJudge().judge(c.conv()), m)
    assert (v.status, v.label, v.evidence["unsupported_families"]) == ("ok", 0, [family])


def test_month_names_with_a_long_s_are_dates() -> None:
    """``Augu\u017ft`` is matched by the month pattern like ``August``: the same date key."""
    assert [f.key for f in extract_figures("Booked for Augu\u017ft 5, 2024.")] == ["2024-08-05"]
    assert [f.key for f in extract_figures("on 5 AUGU\u017fT 2024")] == ["2024-08-05"]


def test_tool_backs_excludes_read_only_tools() -> None:
    assert tool_backs("cancel_reservation", "cancel")
    assert not tool_backs("get_reservation_details", "book")
    assert not tool_backs("search_direct_flight", "book")
    assert tool_backs("book_reservation", "book")


# --- repeated identical tool call ------------------------------------------------------------


def test_repeat_after_success_is_wrong_action_even_with_reordered_keys() -> None:
    c = Conv()
    first = c.say(None, ("k1", "get_order", {"order_id": "#W1", "fields": ["a", "b"]}))
    r1 = c.result("k1", "get_order")
    second = c.say(None, ("k2", "get_order", {"fields": ["a", "b"], "order_id": "#W1"}))
    verdicts = RepeatedToolCallJudge().judge(c.conv())
    assert _one(verdicts, first).label == 1
    v = _one(verdicts, second)
    assert (v.label, v.categories) == (0, ("wrong_action",))
    rep = v.evidence["repeats"][0]
    assert (rep["call_id"], rep["name"], rep["previous_call_id"]) == ("k2", "get_order", "k1")
    assert (rep["previous_message_event_id"], rep["previous_result_event_id"]) == (first, r1)
    assert rep["previous_ok"] is True


def test_a_read_again_after_a_successful_write_is_no_repeat() -> None:
    c = Conv()
    c.say(None, ("k1", "get_order_details", {"order_id": "#W1"}))
    c.result("k1", "get_order_details")
    c.say(None, ("k2", "cancel_pending_order", {"order_id": "#W1"}))
    c.result("k2", "cancel_pending_order")
    again = c.say(None, ("k3", "get_order_details", {"order_id": "#W1"}))  # the state changed
    c.result("k3", "get_order_details")
    third = c.say(None, ("k4", "get_order_details", {"order_id": "#W1"}))  # nothing changed
    c.say(None, ("k5", "cancel_pending_order", {"order_id": "#W1"}))  # a write: not a read
    verdicts = RepeatedToolCallJudge().judge(c.conv())
    assert _one(verdicts, again).label == 1
    assert _one(verdicts, third).label == 0


def test_different_arguments_and_messages_without_calls() -> None:
    c = Conv()
    c.say("Let me look.", ("k1", "get_order", {"order_id": "#W1"}))
    c.result("k1", "get_order")
    c.say("Found it.")
    c.say(None, ("k2", "get_order", {"order_id": "#W2"}))
    verdicts = RepeatedToolCallJudge().judge(c.conv())
    assert [(v.item_id, v.label) for v in verdicts] == [("e0", 1), ("e3", 1)]


@pytest.mark.parametrize(
    ("error", "label"),
    [
        ("Error: request timed out", 1),
        ("HTTP 503 Service Unavailable", 1),
        ("rate limit exceeded, try again later", 1),
        ("Error: Reservation IFOYFZ not found", 0),
        ("Error: 1 validation error for Payment", 0),
    ],
)
def test_retry_after_error_counts_only_when_the_error_is_permanent(error: str, label: int) -> None:
    c = Conv()
    c.say(None, ("k1", "get_reservation_details", {"reservation_id": "IFOYFZ"}))
    c.result("k1", "get_reservation_details", error, ok=False)
    m = c.say(None, ("k2", "get_reservation_details", {"reservation_id": "IFOYFZ"}))
    v = _one(RepeatedToolCallJudge().judge(c.conv()), m)
    assert v.label == label
    assert len(v.evidence["transient_retries"]) == label
    assert all(r["previous_ok"] is False for r in v.evidence["repeats"])


def test_identical_calls_in_one_message() -> None:
    c = Conv()
    m = c.say(
        None, ("k1", "calculate", {"expression": "1+1"}), ("k2", "calculate", {"expression": "1+1"})
    )
    v = _one(RepeatedToolCallJudge().judge(c.conv()), m)
    assert v.label == 0 and v.evidence["repeats"][0]["previous_result_event_id"] is None
    assert canonical_arguments({"b": 1, "a": [2]}) == '{"a":[2],"b":1}'


# --- ignored tool error ----------------------------------------------------------------------


def test_success_talk_after_failed_call_is_wrong_information() -> None:
    c = Conv()
    c.say(None, ("k1", "refund_order", {"order_id": "#W1"}))
    r = c.result("k1", "refund_order", "Error: payment gateway rejected", ok=False)
    m = c.say("Your refund has been processed successfully.")
    v = _one(IgnoredToolErrorJudge().judge(c.conv()), m)
    assert (v.label, v.categories) == (0, ("wrong_information",))
    assert v.evidence["failed_calls"] == [
        {
            "result_event_id": r,
            "call_id": "k1",
            "name": "refund_order",
            "error": "Error: payment gateway rejected",
        }
    ]


@pytest.mark.parametrize(
    "text",
    [
        "I'm sorry, I couldn't process the refund. Could you try again later?",
        "Unfortunately there was an error: the refund has not been completed.",
        "I was unable to find that order.",
        "Could you double-check the order number?",  # neither success nor acknowledgement
    ],
)
def test_acknowledged_or_neutral_replies_pass(text: str) -> None:
    c = Conv()
    c.say(None, ("k1", "refund_order", {"order_id": "#W1"}))
    c.result("k1", "refund_order", "Error: not found", ok=False)
    c.say(None, ("k2", "transfer_to_human_agents", {"summary": "x"}))  # no text: skipped
    c.result("k2", "transfer_to_human_agents", "Transfer successful")
    m = c.say(text)
    v = _one(IgnoredToolErrorJudge().judge(c.conv()), m)
    assert v.label == 1 and v.categories == ()


def test_a_failed_model_call_answered_on_retry_is_not_an_ignored_error() -> None:
    # how the OTLP mapping stores a provider's 500 before the agent's retry answered
    c = Conv()
    c.say(None, ("k1", "get_order", {"order_id": "#W1"}))
    c.result("k1", "get_order", '{"status": "delivered"}')
    c.result("llm:span-1", "llm", "InternalServerError: Error code: 500", ok=False)
    c.say("Your order has been delivered successfully.")
    assert IgnoredToolErrorJudge().judge(c.conv()) == []
    # a failed tool still counts when the model's answer ignores it
    r = c.result("k2", "refund_order", "Error: payment gateway rejected", ok=False)
    c.result("llm:span-2", "llm", "RateLimitError: Error code: 429", ok=False)
    m = c.say("Your refund has been processed successfully.")
    v = _one(IgnoredToolErrorJudge().judge(c.conv()), m)
    assert v.label == 0 and [f["result_event_id"] for f in v.evidence["failed_calls"]] == [r]


def test_failure_superseded_by_a_successful_retry_is_not_checked() -> None:
    c = Conv()
    c.say(None, ("k1", "book_reservation", {"a": 1}))
    c.result("k1", "book_reservation", "Error: validation", ok=False)
    c.say(None, ("k2", "book_reservation", {"a": 2}))
    c.result("k2", "book_reservation", '{"reservation_id": "HATHAT"}')
    c.say("Your flight has been successfully booked!")
    c.say("Anything else?")
    assert IgnoredToolErrorJudge().judge(c.conv()) == []


# --- unsupported figure ----------------------------------------------------------------------


def test_an_identifier_given_as_an_example_of_a_format_is_not_a_figure() -> None:
    text = (
        "Please share your user ID (it should be something like 'sara_doe_496') and your "
        "reservation ID (e.g., ZFA04Y), such as the one for flight HAT271 in your e-mail."
    )
    assert [f.key for f in extract_figures(text)] == ["hat271"]


def test_figure_extraction_and_normalisation() -> None:
    text = (
        "Paid $1,234.50 and 12.50 USD and 30 dollars on May 1st, 2024, 2024-05-02, 05/03/2024 "
        "and 4 June for order #W1234567, booking ABC123, ticket 00012345 (the 2nd)."
    )
    got = [(f.kind, f.key) for f in extract_figures(text)]
    assert got == [
        ("amount", "1234.5"),
        ("amount", "12.5"),
        ("amount", "30"),
        ("date", "2024-05-02"),
        ("date", "2024-05-03"),
        ("date", "2024-05-01"),
        ("date", "*-06-04"),
        ("identifier", "w1234567"),
        ("identifier", "abc123"),
        ("identifier", "00012345"),
    ]
    assert normalise_amount("1,234.50") == normalise_amount("1234.5") == "1234.5"
    assert normalise_amount("12.00") == "12"
    assert extract_figures("You have 2 free bags and 1 item.") == []


def test_unsupported_amount_date_and_id_are_fabrications() -> None:
    c = Conv()
    c.user("My order is #W1234567.")
    c.say(None, ("k1", "get_order_details", {"order_id": "#W1234567"}))
    c.result("k1", "get_order_details", '{"total": 1234.5, "placed": "2024-05-01T10:00:00"}')
    ok = c.say("Order #W1234567 from May 1 cost $1,234.50.")
    bad = c.say("You paid $99.99 on 2024-06-01 with ticket ZZ9999X.")
    verdicts = UnsupportedFigureJudge().judge(c.conv())
    assert (_one(verdicts, ok).label, _one(verdicts, ok).score) == (1, 1.0)
    v = _one(verdicts, bad)
    assert v.label == 0 and v.score == 0.0
    assert v.categories == (
        "fabrication",
        "fabrication:account",
        "fabrication:history",
        "fabrication:pricing",
    )
    assert [u["text"] for u in v.evidence["unsupported"]] == ["$99.99", "2024-06-01", "ZZ9999X"]


def test_sources_must_come_before_the_message() -> None:
    c = Conv()
    early = c.say("Your refund is $42.", ("k1", "get_refund", {"amount": 17}))
    c.result("k1", "get_refund", '{"amount": 42}')
    later = c.say("So that is $42, and $17 was requested.")
    verdicts = UnsupportedFigureJudge().judge(c.conv())
    assert _one(verdicts, early).label == 0  # its own call's result arrives after it
    assert _one(verdicts, later).label == 1  # earlier tool output and call arguments
    assert _one(verdicts, later).evidence["source_event_ids"] == {"$42": "e1", "$17": early}


def test_derived_totals_reference_texts_and_messages_without_figures() -> None:
    c = Conv()
    c.say(None, ("k1", "search_flights", {}))
    c.result("k1", "search_flights", '[{"price": 174}, {"price": 306}]')
    each = c.say("It is $174 per person, so $348 for both passengers.")
    alone = c.say("The total is $348.")
    total = c.say("Flights cost $174 and $306, $480 in total; bags are 50 dollars each.")
    c.say("Anything else?")
    verdicts = UnsupportedFigureJudge().judge(c.conv())
    assert _one(verdicts, each).label == 1
    assert _one(verdicts, each).evidence["derived"] == {"$348": "2 x 174"}
    assert _one(verdicts, alone).label == 0
    assert [u["text"] for u in _one(verdicts, total).evidence["unsupported"]] == ["50 dollars"]
    with_ref = UnsupportedFigureJudge(("Each extra bag is 50 dollars.",)).judge(c.conv())
    assert _one(with_ref, total).label == 1 and len(with_ref) == 3
    assert _one(with_ref, total).evidence["source_event_ids"]["50 dollars"] == "reference:0"


def test_question_answer_traffic_without_tools_gets_no_verdict() -> None:
    # the trivia answers that were flagged fabrication:account ("1950s") and :pricing ("$42")
    c = Conv()
    c.user("When did rock and roll start, and what did a concert ticket cost?")
    c.say("Rock and roll took off in the 1950s; a ticket was about $42 in today's money.")
    c.user("And the first Beatles single?")
    c.say("Love Me Do, released on October 5, 1962. I have booked nothing, just answering.")
    assert run_all(c.conv()) == []
    # an agent known to call tools elsewhere is judged even where it called none
    tool_agent = run_all(Conversation.of(c.events, agent_uses_tools=True))
    assert {v.judge for v in tool_agent} == {"det.authorization", "det.unsupported_figure"}
    assert [f.text for f in extract_figures("the 1950s, 100km, 1080p, 4k, HAT271")] == ["HAT271"]
    # the same answer in a tool-using conversation is checked
    c.say(None, ("k1", "search_web", {"q": "ticket price"}))
    c.result("k1", "search_web", '{"price": 42}')
    c.say("So a ticket was $42.")
    got = run_all(c.conv())
    assert {(v.judge, v.label) for v in got} >= {("det.unsupported_figure", 1)}


def test_repeated_think_calls_are_not_repeats() -> None:
    c = Conv()
    c.say(None, ("k1", "think", {"thought": "check the booking"}))
    c.result("k1", "think", "")
    m = c.say(
        None,
        ("k2", "think", {"thought": "check the booking"}),
        ("k3", "get_reservation", {"id": "EHGLP3"}),
    )
    c.result("k3", "get_reservation", "{}")
    only_think = c.say(None, ("k4", "think", {"thought": "check the booking"}))
    verdicts = RepeatedToolCallJudge().judge(c.conv())
    assert [v.item_id for v in verdicts] == [m]  # messages with only think calls: no verdict
    assert verdicts[0].label == 1 and verdicts[0].evidence["calls"] == [
        {"call_id": "k3", "name": "get_reservation"}
    ]
    assert only_think not in {v.item_id for v in verdicts}


# --- registry, run_all, errors ---------------------------------------------------------------


def test_registry_and_run_all() -> None:
    judges = deterministic_judges()
    assert [j.name for j in judges] == [
        "det.authorization",
        "det.repeated_call",
        "det.ignored_error",
        "det.unsupported_figure",
    ]
    assert all(j.version == "3" for j in judges)
    assert all("tool-using" in j.applies_to for j in judges)
    c = Conv()
    c.say(None, ("k0", "get_order", {"id": 1}))
    c.result("k0", "get_order", "{}")
    c.say("Your order has been cancelled for $10.")
    got = run_all(c.conv())
    assert [(v.judge, v.label) for v in got] == [
        ("det.authorization", 0),
        ("det.repeated_call", 1),
        ("det.unsupported_figure", 0),
    ]


def test_a_crashing_judge_returns_an_error_verdict() -> None:
    class Broken(RepeatedToolCallJudge):
        def _judge(self, conv: Conversation) -> list[Verdict]:
            raise RuntimeError("boom")

    c = Conv()
    c.say("hi", ("k0", "get_order", {}))
    (v,) = Broken().judge(c.conv())
    assert (v.status, v.item_id, v.label, v.error) == ("error", None, None, "RuntimeError: boom")


# --- the real tau2 runs ----------------------------------------------------------------------

# Every label-0 verdict on the two files, read by hand (see the report in the test docstring).
TAU2_FLAGS = {
    ("det.authorization", "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4:28"),  # "a note has been
    # added" to the booking: no tool can add notes; book_reservation had no note (true positive)
    ("det.repeated_call", "tau2:71f463c8-7725-4b01-838d-18e76fd959de:8"),  # IFOYFZ re-sent after
    ("det.repeated_call", "tau2:00dfb6bc-e5d3-4d3b-929d-b1b3e8a546a9:8"),  # "not found" although
    ("det.repeated_call", "tau2:c754a28a-44e0-4175-9b9f-0ba2a510c8dc:8"),  # the user said IFOYYZ
    ("det.repeated_call", "tau2:0888d59a-a042-4192-8c64-699870a5ad7e:18"),  # same failing booking
    ("det.unsupported_figure", "tau2:251f444a-b9ae-44c5-b7b7-b2d6e3430185:30"),  # $171 = 77+94
    # is a per-passenger fare, the reservation was paid $402; $477 follows from it (true positive)
    ("det.unsupported_figure", "tau2:c7632ce1-d05b-4a8e-980f-87bb4cdee936:10"),  # "May 10th"
    # from the user's "the 10th of this month": a correct inference (false positive)
}


def _tau2(files: list[Path], with_policy: bool = True) -> list[tuple[Conversation, Verdict]]:
    out: list[tuple[Conversation, Verdict]] = []
    for path in files:
        raw = json.loads(path.read_text())
        ref = (raw["info"]["environment_info"]["policy"],) if with_policy else ()
        convs: dict[str, list[AgentEvent]] = {}
        for e in tau2_file_events(path):
            convs.setdefault(e.conversation_id, []).append(e)
        for events in convs.values():
            conv = Conversation.of(events)
            out.extend((conv, v) for v in run_all(conv, ref))
    return out


def _event_ids(evidence: Any) -> list[str]:
    """Every event id an evidence mapping cites (``*event_id`` keys, ``source_event_ids``)."""
    if isinstance(evidence, dict):
        cited = [s for s in evidence.get("source_event_ids", {}).values() if s.startswith("tau2")]
        return cited + [
            x
            for k, v in evidence.items()
            for x in ([v] if k.endswith("event_id") and isinstance(v, str) else _event_ids(v))
        ]
    if isinstance(evidence, list):
        return [x for v in evidence for x in _event_ids(v)]
    return []


def test_tau2_flags_are_the_ones_read_by_hand(tau2_files: list[Path]) -> None:
    results = _tau2(tau2_files)
    counts = Counter((v.judge, v.label) for _, v in results)
    print("\ntau2 verdicts per (judge, label):", dict(sorted(counts.items())))
    assert {(v.judge, v.item_id) for _, v in results if v.label == 0} == TAU2_FLAGS
    assert all(v.status == "ok" for _, v in results)
    # checks that passed: 7 backed claims (4 cancellations, 2 bookings, 1 certificate), every
    # tool-calling message, 13 answers to failed calls (12 apologise, 1 is the transfer notice)
    assert counts[("det.authorization", 1)] == 7
    assert counts[("det.ignored_error", 1)] == 13 and counts[("det.ignored_error", 0)] == 0
    assert 150 <= counts[("det.repeated_call", 1)] <= 180
    assert 60 <= counts[("det.unsupported_figure", 1)] <= 90


def test_tau2_evidence_cites_only_earlier_events(tau2_files: list[Path]) -> None:
    judges: set[str] = set()
    for conv, v in _tau2(tau2_files):
        pos = {e.event_id: i for i, e in enumerate(conv.events)}
        assert v.item_id is not None and v.evidence["message_event_id"] == v.item_id
        assert conv.events[pos[v.item_id]].message is not None
        cited = [x for x in _event_ids(v.evidence) if x != v.item_id]
        assert all(pos[x] < pos[v.item_id] for x in cited), v
        assert all(c in ALL_CATEGORIES for c in v.categories)
        judges.add(v.judge)
    assert len(judges) == 4


def test_tau2_specific_verdicts(tau2_files: list[Path]) -> None:
    by_item = {(v.judge, v.item_id): v for _, v in _tau2(tau2_files)}
    note = by_item[("det.authorization", "tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4:28")]
    claims = {c["family"]: [s["name"] for s in c["supported_by"]] for c in note.evidence["claims"]}
    assert claims == {"book": ["book_reservation"], "note": []}
    total = by_item[("det.unsupported_figure", "tau2:251f444a-b9ae-44c5-b7b7-b2d6e3430185:30")]
    assert [u["text"] for u in total.evidence["unsupported"]] == ["$171", "$477"]
    assert total.categories == ("fabrication", "fabrication:pricing")
    summed = by_item[("det.unsupported_figure", "tau2:9ca28a22-3381-40f3-a8ba-8727c72d155b:18")]
    assert summed.label == 1 and summed.evidence["derived"] == {"$708": "306 + 402"}
    cert = by_item[("det.authorization", "tau2:bba0f089-e0b6-4095-bd5b-fc9d0f3a8fe4:30")]
    assert cert.label == 1 and cert.evidence["claims"][0]["family"] == "compensation"
    repeat = by_item[("det.repeated_call", "tau2:71f463c8-7725-4b01-838d-18e76fd959de:8")]
    assert repeat.evidence["repeats"][0]["arguments"] == {"reservation_id": "IFOYFZ"}
    assert repeat.evidence["repeats"][0]["previous_ok"] is False


def test_tau2_without_the_policy_flags_policy_figures(tau2_files: list[Path]) -> None:
    flagged = {
        (v.item_id, u["text"])
        for _, v in _tau2(tau2_files, with_policy=False)
        if v.judge == "det.unsupported_figure"
        for u in v.evidence["unsupported"]
    }
    # $50 a bag, $30 insurance and today's date come from the policy, not from the conversation
    assert ("tau2:f04708e3-7b2d-48ec-9878-b60251dc54bd:6", "$50") in flagged
    assert ("tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4:18", "$30") in flagged
    assert ("tau2:71f463c8-7725-4b01-838d-18e76fd959de:22", "2024-05-15") in flagged


def test_judges_satisfy_the_protocol() -> None:
    judges: list[Judge] = deterministic_judges(("policy",))
    assert isinstance(judges[3], UnsupportedFigureJudge) and judges[3].reference == ("policy",)
