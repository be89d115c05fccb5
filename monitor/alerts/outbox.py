"""The notification outbox in SQL: :func:`enqueue` (used inside the evaluator's transaction)
and the statements the notifier runs (see :mod:`monitor.alerts.notifier` for the protocol).

Rows of one sink are delivered in id order per ordering key: the payload's ``incident_id``
(so an incident's page reaches a sink before its updates, which thread under it), else its
``fingerprint``, or ``group_key`` for a grouped notification.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from monitor.alerts.grouping import GroupedNotification
from monitor.alerts.states import Notification
from monitor.store.tables_alerts import notification_outbox

CLAIM_SQL = text("""
WITH due AS (
  SELECT o.id FROM notification_outbox o
  WHERE o.status = 'pending' AND o.next_attempt_at <= :now
    AND o.sink = ANY(:sinks) AND NOT (o.id = ANY(:seen))
    AND NOT EXISTS (
      SELECT 1 FROM notification_outbox p
      WHERE p.sink = o.sink AND p.status = 'pending' AND p.id < o.id
        AND COALESCE(p.payload->>'incident_id', p.payload->>'fingerprint',
                     p.payload->>'group_key')
          = COALESCE(o.payload->>'incident_id', o.payload->>'fingerprint',
                     o.payload->>'group_key'))
  ORDER BY o.id LIMIT :limit
  FOR UPDATE OF o SKIP LOCKED)
UPDATE notification_outbox t SET attempts = t.attempts + 1, next_attempt_at = :lease_until
FROM due WHERE t.id = due.id
RETURNING t.id, t.idempotency_key, t.sink, t.payload, t.attempts""")
THREAD_SQL = text("""
SELECT response FROM notification_outbox
WHERE sink = :sink AND status = 'delivered' AND response @> CAST(:probe AS jsonb)
ORDER BY id LIMIT 1""")
NEXT_DUE_SQL = text(
    "SELECT min(next_attempt_at) FROM notification_outbox "
    "WHERE status = 'pending' AND sink = ANY(:sinks)"
)


PayloadLike = Mapping[str, Any] | Notification | GroupedNotification


async def enqueue(
    conn: AsyncConnection | AsyncEngine,
    notification_payloads: Iterable[PayloadLike],
    sinks: Iterable[str],
    now: datetime | None = None,
) -> int:
    """Insert one outbox row per (payload, sink), ``ON CONFLICT DO NOTHING`` on (key, sink).

    Payloads are notifications (or their ``to_dict()``), each with an ``idempotency_key``; add
    ``"redact_customer_content": false`` to a dict when its rule opted in to customer content.
    With an ``AsyncConnection`` the rows join the caller's transaction (the evaluator's state
    change); with an engine they are committed here. ``now`` sets ``next_attempt_at`` and
    ``created_at`` (default: the database's ``now()``). Returns the number of rows inserted.
    """
    names = list(sinks)
    rows: list[dict[str, Any]] = []
    for p in notification_payloads:
        payload = p.to_dict() if isinstance(p, Notification | GroupedNotification) else dict(p)
        for sink in names:
            row: dict[str, Any] = {"idempotency_key": str(payload["idempotency_key"])}
            row |= {"sink": sink, "payload": payload}
            if now is not None:
                row |= {"next_attempt_at": now, "created_at": now}
            rows.append(row)
    if not rows:
        return 0
    stmt = insert(notification_outbox).on_conflict_do_nothing(constraint="uq_outbox_key_sink")
    if isinstance(conn, AsyncEngine):
        async with conn.begin() as c:
            return await _insert(c, stmt, rows)
    return await _insert(conn, stmt, rows)


async def _insert(conn: AsyncConnection, stmt: Any, rows: list[dict[str, Any]]) -> int:
    inserted = 0
    for row in rows:  # one by one: ids follow the given order, rowcount is exact
        inserted += (await conn.execute(stmt.values(**row))).rowcount
    return inserted
