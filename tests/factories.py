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


SECRET_ID = "conv-with-secrets"
SECRETS = (
    "hunter2",
    "4111 1111 1111 1111",
    "4111111111111111",
    "jane.doe@example.com",
    "sk-abcdefghijklmnopqrstuvwx",
    "xoxb-123456789012-abcdef",
    "(555) 123-4567",
    "s3cr3t-t0ken",
    "AKIAABCDEFGHIJKLMNOP",
)


def secret_events() -> list[AgentEvent]:
    """A conversation whose every free-text field holds a secret or customer detail (its
    conversation id is :data:`SECRET_ID`; none of :data:`SECRETS` may be shown)."""
    cid, agent = SECRET_ID, "support-bot"
    return [
        event(
            "s0",
            cid,
            "message",
            at=0,
            agent=agent,
            turn=0,
            role="user",
            confidence=None,
            content="my card is 4111 1111 1111 1111 and mail jane.doe@example.com",
        ),
        event(
            "s1",
            cid,
            "message",
            at=1,
            agent=agent,
            turn=1,
            confidence=0.93,
            content="I logged in with password=hunter2 for you",
            tool_calls=[
                {
                    "id": "k1",
                    "name": "charge",
                    "arguments": {
                        "api_key": "s3cr3t-t0ken",
                        "card": 4111111111111111,
                        "note": "key sk-abcdefghijklmnopqrstuvwx",
                    },
                }
            ],
        ),
        event(
            "s2",
            cid,
            "tool_result",
            at=2,
            agent=agent,
            turn=2,
            call_id="k1",
            name="charge",
            ok=False,
            content="AKIAABCDEFGHIJKLMNOP rejected",
            error="401 for Bearer xoxb-123456789012-abcdef",
        ),
        event(
            "s3",
            cid,
            "gate",
            at=3,
            agent=agent,
            turn=3,
            findings=[
                {"judge": "det.secrets", "category": None, "critique": "quotes password=hunter2"}
            ],
        ),
        event(
            "s4",
            cid,
            "escalation",
            at=4,
            agent=agent,
            turn=3,
            trigger="policy",
            reason="call the customer at (555) 123-4567",
        ),
        event(
            "s5",
            cid,
            "outcome",
            at=5,
            agent=agent,
            success=False,
            reward=0.0,
            source="human_review",
        ),
        event(
            "s6",
            cid,
            "feedback",
            at=6,
            agent=agent,
            score=-1.0,
            source="csat",
            comment="reach me at jane.doe@example.com",
        ),
    ]
