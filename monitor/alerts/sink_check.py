"""``monitor alerts test``'s engine: send a sample notification through each sink once.

Re-exported by :mod:`monitor.alerts.notifier`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from monitor.alerts.sinks.base import DeliveryContext, Sink, classify_exception
from monitor.alerts.sinks.registry import configured_sinks
from monitor.alerts.states import Kind, Notification
from monitor.config import Settings


@dataclass(frozen=True)
class SinkTestResult:
    """What one sink answered to the sample notification of :func:`test_sinks`."""

    sink: str
    ok: bool
    outcome: str
    status: int | None
    detail: str


def sample_notification(now: datetime) -> Notification:
    """A firing notification that says it is a test (unique idempotency key each call)."""
    scope = {"agent": "sample-agent", "domain": "sample", "tier": "3"}
    return Notification(
        idempotency_key=f"test:{uuid.uuid4().hex}:firing:0",
        kind=Kind.FIRING,
        sequence=0,
        fingerprint="0000000000000000",
        rule="monitor-test",
        metric="ece",
        severity="info",
        scope=scope,
        labels={**scope, "alertname": "monitor-test", "severity": "info", "metric": "ece"},
        summary="Test notification from `monitor alerts test`: delivery works",
        description="Sent on request to check this sink; no action needed.",
        runbook_url=None,
        value=0.12,
        threshold=0.05,
        comparison=">",
        samples=500.0,
        window="1h",
        fired_at=now,
        resolved_at=None,
        created_at=now,
    )


async def test_sinks(
    settings: Settings, sinks: Mapping[str, Sink] | None = None, now: datetime | None = None
) -> list[SinkTestResult]:
    """Send one sample notification through each configured sink (or ``sinks``), once, and
    report what each answered, in sink order. Sinks built here are closed here."""
    own = sinks is None
    targets = configured_sinks(settings) if sinks is None else dict(sinks)
    now = now or datetime.now(UTC)
    payload = sample_notification(now).to_dict()
    out = []
    try:
        for name, sink in targets.items():
            ctx = DeliveryContext(str(payload["idempotency_key"]), 1, now)
            try:
                result = await sink.deliver(payload, ctx)
            except Exception as exc:  # a sink must not raise; report it if one does
                result = classify_exception(exc, name)
            detail = result.error or json.dumps(result.response, default=str)
            out.append(SinkTestResult(name, result.ok, result.outcome, result.status, detail))
    finally:
        if own:
            await asyncio.gather(*(s.aclose() for s in targets.values()))
    return out


test_sinks.__test__ = False  # type: ignore[attr-defined]  # not a pytest test
