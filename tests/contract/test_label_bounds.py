"""Every label at its contract bound, in 4-byte UTF-8 characters, fits the store's indexes:
what the contract accepts, the writer stores (real Postgres), so nothing is accepted and then
dead-lettered by the store."""

from __future__ import annotations

import asyncpg
import pytest

from monitor.contract.events import validate_event
from monitor.contract.limits import MAX_LABEL_CHARS
from monitor.core.errors import InvalidEvent
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.store.engine import libpq_url
from tests.factories import event_dict

WIDE = "\U0001f600"  # 4 bytes in UTF-8


def widest(
    event_id: str, etype: str, domain: str | None = None, **payload: object
) -> dict[str, object]:
    label = WIDE * MAX_LABEL_CHARS
    context = {k: label for k in ("domain", "channel", "intent", "segment", "task_id")}
    context = {**context, "tier": 3, **({"domain": domain} if domain else {})}
    d = event_dict(event_id, WIDE * 128, etype, context=context, **payload)
    d["agent"] = {"id": WIDE * 128, "version": label, "model": label}
    return d


async def test_labels_at_the_bound_are_stored(database_url: str) -> None:
    events = [
        validate_event(widest("w-m", "message", confidence=0.7)),
        validate_event(widest("w-e", "escalation", confidence=0.2)),
        validate_event(widest("w-o", "outcome")),
    ]
    writer = EventWriter(database_url)
    try:
        await writer.write([event_row(e) for e in events])
    finally:
        await writer.close()
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        assert await conn.fetchval("SELECT count(*) FROM events") == 3
        assert await conn.fetchval("SELECT count(*) FROM dead_letters") == 0
        assert await conn.fetchval("SELECT count(*) FROM calibration_bins") > 0
        assert await conn.fetchval("SELECT count(*) FROM escalation_bins") > 0
        assert await conn.fetchval("SELECT octet_length(domain) FROM conversations") == 1024
    finally:
        await conn.close()
    with pytest.raises(InvalidEvent) as info:
        validate_event(widest("w-x", "message", domain="x" * 257))
    assert (info.value.reason, info.value.field) == ("invalid_value", "context.domain")
    assert "256" in info.value.detail
