"""Conditions shared by the domains' rule sets (pure; no I/O imports).

- :func:`confirmed_before`: a consequential call needs an explicit "yes" in the user turn that
  precedes it (the latest user turn before the message). No user turn yet -> not applicable.
- :func:`one_action_per_turn`: a consequential call is the only tool call of its message (text
  said with a call is not checked: on tau2 runs it predicts nothing).
- :func:`payment_in_profile`: a payment method id must be one of the user's
  ``payment_methods`` (from a ``get_user_details`` result); unknown user -> not applicable.
"""

from __future__ import annotations

import re
from typing import Any

from monitor.contract.events import AgentEvent, ToolCall
from monitor.judges.policy.facts import Facts, Known
from monitor.judges.policy.rule import Check, Evidence

#: an explicit agreement in a user turn ("yes", "go ahead", "please proceed", "confirm" ...)
AFFIRMATIVE = re.compile(
    r"\b(yes|yeah|yep|yup|confirm(ed|s)?|i confirm|proceed|go ahead|go for it|do it|"
    r"sure|correct|ok(ay)?|alright|absolutely|definitely|sounds good|that's right|"
    r"that is right|please do|agreed?|affirmative|exactly)\b",
    re.IGNORECASE,
)


def confirmed_before(call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
    """Explicit user confirmation before a consequential call (module docstring)."""
    turn = facts.last_user_turn()
    if turn is None or turn.message is None:
        return Check.skip("no user turn before the call")
    text = turn.message.content or ""
    quote = Evidence.of(turn, text)
    if AFFIRMATIVE.search(text):
        return Check.passed("the user turn before it confirms", quote)
    return Check.failed("called without an explicit yes in the user turn before it", quote)


def one_action_per_turn(call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
    """A consequential call is the only tool call of its message."""
    msg = message.message
    assert msg is not None
    names = [c.name for c in msg.tool_calls]
    if len(names) > 1:
        return Check.failed(f"{len(names)} tool calls in one message ({', '.join(names)})")
    return Check.passed("the only tool call of its message")


def payment_ids(arguments: dict[str, Any], *keys: str) -> list[str]:
    """The payment method ids in ``arguments`` under ``keys`` (a string, or a list of
    ``{payment_id: ...}`` objects as ``book_reservation`` takes them)."""
    out: list[str] = []
    for key in keys:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            out.append(value)
        elif isinstance(value, list):
            out += [
                str(p["payment_id"]) for p in value if isinstance(p, dict) and p.get("payment_id")
            ]
    return out


def payment_in_profile(user: Known | None, ids: list[str]) -> Check:
    """Every id of ``ids`` is in ``user``'s payment methods (skip when unknown or empty)."""
    if user is None or not ids:
        return Check.skip("no user profile or no payment method in the call")
    methods = user.value.get("payment_methods") or {}
    missing = [p for p in ids if p not in methods]
    listed = ", ".join(sorted(methods)) or "none"
    quote = Evidence.of(user.event, f"payment_methods: {listed}")
    if missing:
        return Check.failed(f"{', '.join(missing)} is not in the user's profile ({listed})", quote)
    return Check.passed("payment methods in the profile", quote)


def payment_source(user: Known | None, payment_id: str) -> str:
    """The ``source`` of ``payment_id`` in ``user``'s profile, else its id prefix
    (``gift_card_123`` -> ``gift_card``)."""
    methods = (user.value.get("payment_methods") or {}) if user is not None else {}
    method = methods.get(payment_id)
    if isinstance(method, dict) and isinstance(method.get("source"), str):
        return str(method["source"])
    return payment_id.rsplit("_", 1)[0] if "_" in payment_id else payment_id


def the_user(facts: Facts, user_id: object) -> Known | None:
    """The user ``user_id`` (None when its details were not fetched); without a user id, the
    only user whose details were fetched (None when there are none or several)."""
    if user_id is not None:
        return facts.get("user", user_id)
    users = facts.all("user")
    return users[0] if len(users) == 1 else None
