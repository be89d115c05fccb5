"""The airline rule set, written from the tau2-bench airline policy (pure; no I/O imports).

Every ``clause`` is a sentence of ``domain_data/airline/policy.md`` (a test checks it). The
conditions read the tau2 airline tools' outputs: ``get_reservation_details`` (cabin,
``created_at``, flights and their dates, passengers, insurance, bags, ``user_id``),
``get_user_details`` (membership, payment methods) and ``get_flight_status``. "Now" is the
policy's own "The current time is ..." line.

Rules (id: the call it guards -> what it checks):

- ``airline.cancel.eligibility``: ``cancel_reservation`` -> nothing flown, and booked within
  24 h, or business, or a flight cancelled by the airline, or insured with a covered reason.
- ``airline.modify.basic_economy``: ``update_reservation_flights`` -> a basic economy
  reservation keeps its flights (only its cabin may change).
- ``airline.cabin.flown``: ``update_reservation_flights`` -> no cabin change once a flight of
  the reservation is in the past.
- ``airline.modify.payment``: ``update_reservation_flights`` -> a gift card or credit card
  pays, not a travel certificate.
- ``airline.bags.no_removal``: ``update_reservation_baggages`` -> bags are added, never removed.
- ``airline.bags.allowance``: ``book_reservation``, ``update_reservation_baggages`` -> the
  non-free bags equal the bags above the tier x cabin allowance x passengers.
- ``airline.payment.in_profile``: ``book_reservation``, ``update_reservation_*`` -> the payment
  ids are in the user's profile.
- ``airline.book.payment_limits``: ``book_reservation`` -> at most one certificate, one credit
  card, three gift cards.
- ``airline.book.passengers``: ``book_reservation`` -> at most five passengers.
- ``airline.passengers.count``: ``update_reservation_passengers`` -> same number of passengers.
- ``airline.compensation.eligibility``: ``send_certificate`` -> not a regular member without
  insurance in (basic) economy.
- ``airline.compensation.amount`` (opt-in, ``default=False``: wrong on the one run held apart
  from its development where it flagged; docs/benchmarks.md): ``send_certificate`` -> $100 or
  $50 per passenger.
- ``airline.compensation.asked``: ``send_certificate`` -> the user asked for compensation.
- ``airline.transfer.passenger_count``: ``transfer_to_human_agents`` -> not for a change of
  the number of passengers (the policy: even a human agent cannot make it); other transfers
  are not judged.
- ``airline.confirmation``: every booking-database update -> an explicit yes in the user turn
  just before.
- ``airline.one_action``: every booking-database update -> the only tool call of its message.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from monitor.contract.events import AgentEvent, ToolCall
from monitor.judges.policy.common import (
    confirmed_before,
    one_action_per_turn,
    payment_ids,
    payment_in_profile,
    payment_source,
    the_user,
)
from monitor.judges.policy.facts import Facts, Known
from monitor.judges.policy.rule import Check, Evidence, Rule

DOMAIN = "airline"
POLICY = "domain_data/airline/policy.md"
NOW_LINE = re.compile(r"current time is (\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?)")
#: free checked bags per passenger, by membership tier and cabin (the policy's table)
FREE_BAGS: dict[str, dict[str, int]] = {
    "regular": {"basic_economy": 0, "economy": 1, "business": 2},
    "silver": {"basic_economy": 1, "economy": 2, "business": 3},
    "gold": {"basic_economy": 2, "economy": 3, "business": 4},
}
WRITES = frozenset(
    {
        "book_reservation",
        "cancel_reservation",
        "update_reservation_flights",
        "update_reservation_baggages",
        "update_reservation_passengers",
    }
)
COVERED_REASON = re.compile(
    r"\b(health|sick|ill|illness|unwell|not feeling well|fever|flu|covid|medical|hospital\w*|"
    r"injur\w*|surgery|doctor|emergency|"
    r"weather|storm\w*|hurricane|snow\w*|flood\w*)\b"
)
AIRLINE_CANCELLED = re.compile(
    r"(airline|you|they)\s+(has |have )?cancel+ed|(was|were|been|got|is)\s+cancel+ed|"
    r"cancel+ed by"
)
ASKED_COMPENSATION = re.compile(
    r"compensat|certificate|voucher|refund|reimburs|credit|make up for|make it up|gesture|"
    r"something for|for the (trouble|inconvenience)"
)


CHANGE_PASSENGER_COUNT = re.compile(
    r"\b(remove|drop|take off|taking off|add|adding|removing)\b[^.?!]{0,40}\bpassengers?\b"
)


def current_time(policy: str) -> datetime | None:
    """The policy's "The current time is YYYY-MM-DD HH:MM:SS" (None when it has none)."""
    found = NOW_LINE.search(policy)
    return datetime.fromisoformat(found.group(1).replace(" ", "T")) if found else None


def _reservation(facts: Facts, call: ToolCall) -> Known | None:
    return facts.get("reservation", call.arguments.get("reservation_id"))


def _flights(res: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in res.get("flights") or [] if isinstance(f, dict)]


def _flown(res: Known, facts: Facts, today: str) -> tuple[str, Evidence] | None:
    """A flight of ``res`` already flown: dated before today, or a status saying so."""
    for f in _flights(res.value):
        key = (str(f.get("flight_number")), str(f.get("date")))
        status = facts.flight_status.get(key)
        if status is not None and status[1] in ("flying", "landed"):
            return f"flight {key[0]} on {key[1]} is {status[1]}", Evidence.of(status[0], status[1])
        if str(f.get("date", "9999")) < today:
            return f"flight {key[0]} on {key[1]} is before today ({today})", _res_ev(res)
    return None


def _res_ev(res: Known) -> Evidence:
    v = res.value
    flights = ", ".join(f"{f.get('flight_number')} {f.get('date')}" for f in _flights(v))
    return Evidence.of(
        res.event,
        f"reservation {v.get('reservation_id')}: cabin {v.get('cabin')}, created "
        f"{v.get('created_at')}, insurance {v.get('insurance')}, passengers "
        f"{len(v.get('passengers') or [])}, bags {v.get('total_baggages')} total / "
        f"{v.get('nonfree_baggages')} non-free, flights {flights}",
    )


def _user_ev(user: Known) -> Evidence:
    v = user.value
    methods = ", ".join(sorted(v.get("payment_methods") or {})) or "none"
    return Evidence.of(
        user.event,
        f"user {v.get('user_id')}: membership {v.get('membership')}, payment methods {methods}",
    )


class AirlineRules:
    """The conditions, bound to the policy's current time."""

    def __init__(self, policy: str) -> None:
        self.now = current_time(policy)

    def cancel_eligibility(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        res = _reservation(facts, call)
        if res is None or self.now is None:
            return Check.skip("no reservation details before the call")
        v = res.value
        today = self.now.date().isoformat()
        flown = _flown(res, facts, today)
        if flown is not None:
            return Check.failed(f"{flown[0]}: a flown reservation cannot be cancelled", flown[1])
        created = _parse_time(v.get("created_at"))
        if created is not None and self.now - created <= timedelta(hours=24):
            return Check.passed("booked within the last 24 h", _res_ev(res))
        if v.get("cabin") == "business":
            return Check.passed("business cabin", _res_ev(res))
        for f in _flights(v):
            status = facts.flight_status.get((str(f.get("flight_number")), str(f.get("date"))))
            if status is not None and "cancel" in status[1]:
                return Check.passed("a flight was cancelled by the airline", _res_ev(res))
        said = facts.user_text()
        if AIRLINE_CANCELLED.search(said):
            return Check.skip("the user says a flight was cancelled (not verified by a tool)")
        if v.get("insurance") == "yes":
            if COVERED_REASON.search(said) or not said:
                return Check.passed("insured, reason covered", _res_ev(res))
            turn = facts.last_user_turn()
            quote = (
                (Evidence.of(turn, turn.message.content or ""),) if turn and turn.message else ()
            )
            return Check.failed(
                "insured, but the user gave no health or weather reason", _res_ev(res), *quote
            )
        if created is None:
            return Check.skip("no creation time")
        return Check.failed(
            f"booked {v.get('created_at')} (over 24 h before {self.now.isoformat(' ')}), "
            f"cabin {v.get('cabin')}, no insurance, no flight cancelled by the airline",
            _res_ev(res),
        )

    def modify_basic_economy(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        res = _reservation(facts, call)
        if res is None:
            return Check.skip("no reservation details before the call")
        if res.value.get("cabin") != "basic_economy":
            return Check.passed("not basic economy", _res_ev(res))
        old = {(str(f.get("flight_number")), str(f.get("date"))) for f in _flights(res.value)}
        new_flights = call.arguments.get("flights")
        if not isinstance(new_flights, list):
            return Check.skip("no flights in the call")
        new = {
            (str(f.get("flight_number")), str(f.get("date")))
            for f in new_flights
            if isinstance(f, dict)
        }
        if new != old:
            changed = ", ".join(sorted(f"{n} {d}" for n, d in new - old)) or "flights dropped"
            return Check.failed(
                f"changes the flights of a basic economy reservation to {changed}", _res_ev(res)
            )
        return Check.passed("same flights (cabin change only)", _res_ev(res))

    def cabin_flown(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        res = _reservation(facts, call)
        cabin = call.arguments.get("cabin")
        if res is None or self.now is None or not cabin:
            return Check.skip("no reservation details or no cabin")
        if cabin == res.value.get("cabin"):
            return Check.passed("cabin unchanged", _res_ev(res))
        flown = _flown(res, facts, self.now.date().isoformat())
        if flown is not None:
            return Check.failed(f"changes the cabin to {cabin} though {flown[0]}", flown[1])
        return Check.passed("no flight flown", _res_ev(res))

    def modify_payment(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        pid = call.arguments.get("payment_id")
        if not isinstance(pid, str) or not pid:
            return Check.skip("no payment id")
        res = _reservation(facts, call)
        user = the_user(facts, res.value.get("user_id") if res else None)
        if payment_source(user, pid) == "certificate":
            ev = (_user_ev(user),) if user else ()
            return Check.failed(f"pays the flight change with travel certificate {pid}", *ev)
        return Check.passed(f"pays with {pid}")

    def bags_no_removal(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        res = _reservation(facts, call)
        total = call.arguments.get("total_baggages")
        before = res.value.get("total_baggages") if res else None
        if res is None or not isinstance(total, int) or not isinstance(before, int):
            return Check.skip("no reservation details or bag counts")
        if total < before:
            return Check.failed(f"lowers the checked bags from {before} to {total}", _res_ev(res))
        return Check.passed(f"bags {before} -> {total}", _res_ev(res))

    def bags_allowance(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        args = call.arguments
        total, nonfree = args.get("total_baggages"), args.get("nonfree_baggages")
        if not isinstance(total, int) or not isinstance(nonfree, int):
            return Check.skip("no bag counts")
        evidence: list[Evidence] = []
        if call.name == "book_reservation":
            cabin, passengers = args.get("cabin"), args.get("passengers")
            user = facts.get("user", args.get("user_id"))
            count = len(passengers) if isinstance(passengers, list) else None
        else:
            res = _reservation(facts, call)
            if res is None:
                return Check.skip("no reservation details")
            cabin, count = res.value.get("cabin"), len(res.value.get("passengers") or [])
            user = facts.get("user", res.value.get("user_id"))
            evidence.append(_res_ev(res))
        tier = user.value.get("membership") if user is not None else None
        if user is None or tier not in FREE_BAGS or cabin not in FREE_BAGS[tier] or not count:
            return Check.skip("membership, cabin or passengers unknown")
        evidence.append(_user_ev(user))
        free = FREE_BAGS[tier][str(cabin)] * count
        expected = max(0, total - free)
        if nonfree != expected:
            return Check.failed(
                f"{nonfree} non-free of {total} bags, but a {tier} member in {cabin} has "
                f"{free} free for {count} passenger(s): {expected} non-free",
                *evidence,
            )
        return Check.passed(f"{expected} non-free of {total}", *evidence)

    def payment_in_profile(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        ids = payment_ids(call.arguments, "payment_methods", "payment_id")
        user_id = call.arguments.get("user_id")
        if user_id is None:
            res = _reservation(facts, call)
            user_id = res.value.get("user_id") if res else None
        return payment_in_profile(the_user(facts, user_id), ids)

    def book_payment_limits(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        ids = payment_ids(call.arguments, "payment_methods")
        if not ids:
            return Check.skip("no payment methods")
        user = the_user(facts, call.arguments.get("user_id"))
        counts: dict[str, int] = {}
        for pid in ids:
            source = payment_source(user, pid)
            counts[source] = counts.get(source, 0) + 1
        limits = {"certificate": 1, "credit_card": 1, "gift_card": 3}
        over = [
            f"{n} {s}s (at most {limits[s]})"
            for s, n in counts.items()
            if s in limits and n > limits[s]
        ]
        if over:
            return Check.failed(f"pays with {', '.join(over)}")
        return Check.passed("within the payment limits")

    def book_passengers(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        passengers = call.arguments.get("passengers")
        if not isinstance(passengers, list):
            return Check.skip("no passengers")
        if len(passengers) > 5:
            return Check.failed(f"books {len(passengers)} passengers")
        return Check.passed(f"{len(passengers)} passenger(s)")

    def passengers_count(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        res = _reservation(facts, call)
        passengers = call.arguments.get("passengers")
        if res is None or not isinstance(passengers, list):
            return Check.skip("no reservation details or passengers")
        before = len(res.value.get("passengers") or [])
        if len(passengers) != before:
            return Check.failed(
                f"changes the number of passengers from {before} to {len(passengers)}", _res_ev(res)
            )
        return Check.passed(f"{before} passenger(s) kept", _res_ev(res))

    def _compensated(self, call: ToolCall, facts: Facts) -> tuple[Known, Known] | None:
        user = facts.get("user", call.arguments.get("user_id"))
        if user is None:
            return None
        mine = [
            r
            for r in facts.all("reservation")
            if r.value.get("user_id") == user.value.get("user_id")
        ]
        return (user, mine[-1]) if mine else None

    def compensation_eligibility(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        found = self._compensated(call, facts)
        if found is None:
            return Check.skip("no user or reservation details")
        user, res = found
        tier, insured = user.value.get("membership"), res.value.get("insurance") == "yes"
        cabin = res.value.get("cabin")
        if tier == "regular" and not insured and cabin in ("economy", "basic_economy"):
            return Check.failed(
                f"compensates a regular member without insurance in {cabin}",
                _user_ev(user),
                _res_ev(res),
            )
        return Check.passed(f"{tier} member, insurance {insured}, {cabin}", _user_ev(user))

    def compensation_amount(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        found = self._compensated(call, facts)
        amount = call.arguments.get("amount")
        if found is None or not isinstance(amount, int | float):
            return Check.skip("no reservation details or amount")
        n = len(found[1].value.get("passengers") or [])
        if not n:
            return Check.skip("no passengers")
        if amount not in (100 * n, 50 * n):
            return Check.failed(
                f"certificate of ${amount:g} for {n} passenger(s): the policy "
                f"gives ${100 * n} or ${50 * n}",
                _res_ev(found[1]),
            )
        return Check.passed(f"${amount:g} for {n} passenger(s)", _res_ev(found[1]))

    def compensation_asked(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        if not facts.user_turns:
            return Check.skip("no user turn")
        if ASKED_COMPENSATION.search(facts.user_text()):
            return Check.passed("the user asked for compensation")
        last = facts.user_turns[-1]
        return Check.failed(
            "sends a certificate the user never asked for",
            Evidence.of(last, (last.message.content if last.message else "") or ""),
        )

    def transfer_passenger_count(self, call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        for turn in reversed(facts.user_turns):
            text = (turn.message.content if turn.message else "") or ""
            if CHANGE_PASSENGER_COUNT.search(text.lower()):
                return Check.failed(
                    "transfers a change of the number of passengers, which a "
                    "human agent cannot make either",
                    Evidence.of(turn, text),
                )
        return Check.skip("no change of the number of passengers asked")


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.replace(tzinfo=None)


def airline_rules(policy: str) -> list[Rule]:
    """The airline rules; ``policy`` is the policy text (its clauses and its current time)."""
    c = AirlineRules(policy)
    res, user = "get_reservation_details", "get_user_details"
    return [
        Rule(
            "airline.cancel.eligibility",
            frozenset({"cancel_reservation"}),
            (res, "get_flight_status", "user turns"),
            "The API does not check that cancellation rules are met, so the agent must make "
            "sure the rules apply before calling the API!",
            c.cancel_eligibility,
        ),
        Rule(
            "airline.modify.basic_economy",
            frozenset({"update_reservation_flights"}),
            (res,),
            "Basic economy flights cannot be modified.",
            c.modify_basic_economy,
        ),
        Rule(
            "airline.cabin.flown",
            frozenset({"update_reservation_flights"}),
            (res, "get_flight_status"),
            "Cabin cannot be changed if any flight in the reservation has already been flown.",
            c.cabin_flown,
        ),
        Rule(
            "airline.modify.payment",
            frozenset({"update_reservation_flights"}),
            (res, user),
            "If the flights are changed, the user needs to provide a single gift card or "
            "credit card for payment or refund method.",
            c.modify_payment,
        ),
        Rule(
            "airline.bags.no_removal",
            frozenset({"update_reservation_baggages"}),
            (res,),
            "The user can add but not remove checked bags.",
            c.bags_no_removal,
        ),
        Rule(
            "airline.bags.allowance",
            frozenset({"book_reservation", "update_reservation_baggages"}),
            (res, user),
            "Checked bag allowance:",
            c.bags_allowance,
            "wrong_arguments",
        ),
        Rule(
            "airline.payment.in_profile",
            frozenset(
                {"book_reservation", "update_reservation_flights", "update_reservation_baggages"}
            ),
            (res, user),
            "All payment methods must already be in user profile for safety reasons.",
            c.payment_in_profile,
            "wrong_arguments",
        ),
        Rule(
            "airline.book.payment_limits",
            frozenset({"book_reservation"}),
            (user,),
            "Each reservation can use at most one travel certificate, at most one credit card, "
            "and at most three gift cards.",
            c.book_payment_limits,
            "wrong_arguments",
        ),
        Rule(
            "airline.book.passengers",
            frozenset({"book_reservation"}),
            (),
            "Each reservation can have at most five passengers.",
            c.book_passengers,
        ),
        Rule(
            "airline.passengers.count",
            frozenset({"update_reservation_passengers"}),
            (res,),
            "The user can modify passengers but cannot modify the number of passengers.",
            c.passengers_count,
        ),
        Rule(
            "airline.compensation.eligibility",
            frozenset({"send_certificate"}),
            (res, user),
            "Do not compensate if the user is regular member and has no travel insurance and "
            "flies (basic) economy.",
            c.compensation_eligibility,
        ),
        Rule(
            "airline.compensation.amount",
            frozenset({"send_certificate"}),
            (res,),
            "the amount being $100 times the number of passengers",
            c.compensation_amount,
            "wrong_arguments",
            default=False,
        ),
        Rule(
            "airline.compensation.asked",
            frozenset({"send_certificate"}),
            ("user turns",),
            "Do not proactively offer a compensation unless the user explicitly asks for one.",
            c.compensation_asked,
        ),
        Rule(
            "airline.transfer.passenger_count",
            frozenset({"transfer_to_human_agents"}),
            ("user turns",),
            "Even a human agent cannot modify the number of passengers.",
            c.transfer_passenger_count,
            "wrong_action",
        ),
        Rule(
            "airline.confirmation",
            WRITES,
            ("user turns",),
            "Before taking any actions that update the booking database (booking, modifying "
            "flights, editing baggage, changing cabin class, or updating passenger "
            "information), you must list the action details and obtain explicit user "
            "confirmation (yes) to proceed.",
            confirmed_before,
        ),
        Rule(
            "airline.one_action",
            WRITES,
            (),
            "You should only make one tool call at a time, and if you make a tool call, you "
            "should not respond to the user simultaneously.",
            one_action_per_turn,
            "wrong_action",
        ),
    ]
