"""Builders of valid agent-event/v1 events for tests (plain values, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.contract.events import AgentEvent, validate_event

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def event_dict(
    event_id: str,
    conversation_id: str = "c1",
    etype: str = "message",
    at: float = 0.0,
    agent: str = "agent-a",
    **payload: Any,
) -> dict[str, Any]:
    """A valid event as a JSON-ready dict; ``at`` is seconds after T0; payload per type."""
    defaults: dict[str, dict[str, Any]] = {
        "message": {"role": "assistant", "content": "ok", "confidence": 0.8},
        "tool_result": {"call_id": "k1", "name": "lookup", "ok": True, "content": "{}"},
        "escalation": {"trigger": "agent", "reason": "needs a human"},
        "outcome": {"success": True, "reward": 1.0, "source": "ground_truth"},
        "feedback": {"score": 0.5, "source": "csat"},
        "gate": {
            "decision": "escalate",
            "confidence": 0.4,
            "calibrated": 0.3,
            "map_version": 2,
            "threshold": 0.5,
            "threshold_source": "policy built-in rules[0]",
            "findings": [
                {
                    "judge": "det.authorization",
                    "category": "fabrication",
                    "critique": "claims cancel done",
                }
            ],
            "policy_version": "built-in-1",
            "latency_ms": 1.5,
        },
    }
    turn = payload.pop("turn", None)
    context = payload.pop("context", {"domain": "retail", "tier": 2})
    body = {**defaults[etype], **payload}
    out: dict[str, Any] = {
        "schema": "agent-event/v1",
        "event_id": event_id,
        "type": etype,
        "ts": (T0 + timedelta(seconds=at)).isoformat(),
        "conversation_id": conversation_id,
        "agent": {"id": agent, "version": "1.0"},
        "context": context,
        etype: body,
    }
    if turn is not None:
        out["turn"] = turn
    return out


def event(*args: Any, **kwargs: Any) -> AgentEvent:
    return validate_event(event_dict(*args, **kwargs))
