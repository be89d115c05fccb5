"""A long, tool-using conversation of any length (plain values): an airline-style support loop
that repeats with fresh ids, so every judge has something to check in every cycle.

Each 12-event cycle ``i``: a user asks to cancel reservation ``R{i}``; the assistant looks it up
(ok), cancels it (every 5th cancel fails, transiently or for good), sometimes retries the same
call, and answers with action claims, amounts, dates (with and without a year) and ids, some
supported by the tool output and some not (a fabricated refund amount every 7th cycle).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from monitor.contract.events import AgentEvent
from tests.factories import event_dict


def _cycle(i: int) -> list[tuple[str, dict[str, Any]]]:
    """The events (type, payload) of cycle ``i``."""
    out: list[tuple[str, dict[str, Any]]] = []

    def add(etype: str, **payload: Any) -> None:
        out.append((etype, payload))

    rid, price = f"R{i:06d}X", 100 + i % 90
    day = 1 + i % 28
    add(
        "message",
        role="user",
        content=f"Please cancel reservation {rid} from May {day}.",
        confidence=None,
    )
    lookup = {
        "id": f"q{i}",
        "name": "get_reservation_details",
        "arguments": {"reservation_id": rid},
    }
    add("message", role="assistant", content=None, tool_calls=[lookup], confidence=0.9)
    details = {
        "reservation_id": rid,
        "price": price,
        "date": f"2024-05-{day:02d}",
        "payment_id": f"credit_card_{i:07d}",
    }
    add(
        "tool_result",
        call_id=f"q{i}",
        name="get_reservation_details",
        ok=True,
        content=json.dumps(details),
    )
    cancel = {"id": f"k{i}", "name": "cancel_reservation", "arguments": {"reservation_id": rid}}

    def cancelled(call_id: str) -> None:
        refund = json.dumps({"status": "cancelled", "refund": price})
        add("tool_result", call_id=call_id, name="cancel_reservation", ok=True, content=refund)

    add("message", role="assistant", content=None, tool_calls=[cancel], confidence=0.8)
    if i % 5 == 1:
        error = "timeout, try again" if i % 10 == 1 else "reservation not found"
        add(
            "tool_result",
            call_id=f"k{i}",
            name="cancel_reservation",
            ok=False,
            content=error,
            error=error,
        )
        add("message", role="assistant", content="It is all set and done.", confidence=0.7)
        again = {**cancel, "id": f"k{i}b"}
        add("message", role="assistant", content=None, tool_calls=[again], confidence=0.6)
        cancelled(f"k{i}b")
    else:
        cancelled(f"k{i}")
        add("message", role="user", content="Thanks. When will I see the refund?", confidence=None)
        add("message", role="assistant", content="Within 5 to 7 business days.", confidence=0.9)
        add("message", role="user", content="Fine.", confidence=None)
    refund = price + 1 if i % 7 == 3 else price
    add(
        "message",
        role="assistant",
        content=f"Your reservation {rid} from May {day} has been cancelled and ${refund} "
        f"has been refunded to credit_card_{i:07d} on 2024-05-{day:02d}. "
        f"Reference CX{i:06d}9.",
        confidence=0.85,
    )
    add("message", role="user", content="Anything else I should know?", confidence=None)
    add("message", role="assistant", content="No, you are all set.", confidence=0.95)
    return out


def iter_long_conversation(
    n_events: int, conversation_id: str = "c-long", agent: str = "agent-long"
) -> Iterator[dict[str, Any]]:
    """``n_events`` valid agent-event/v1 dicts of one conversation (ids ``<cid>:<n>``), one at
    a time (a 100,000-event conversation never needs to be in memory at once)."""
    n, i = 0, 0
    while True:
        for etype, payload in _cycle(i):
            if n >= n_events:
                return
            yield event_dict(
                f"{conversation_id}:{n}",
                conversation_id,
                etype,
                at=n * 0.5,
                agent=agent,
                turn=n,
                context={"domain": "retail", "tier": 2},
                **payload,
            )
            n += 1
        i += 1


def long_conversation_dicts(
    n_events: int, conversation_id: str = "c-long", agent: str = "agent-long"
) -> list[dict[str, Any]]:
    """:func:`iter_long_conversation` as a list."""
    return list(iter_long_conversation(n_events, conversation_id, agent))


def long_conversation(n_events: int, conversation_id: str = "c-long") -> list[AgentEvent]:
    """:func:`long_conversation_dicts` validated into events."""
    from monitor.contract.events import validate_event

    return [validate_event(d) for d in long_conversation_dicts(n_events, conversation_id)]
