"""The reads behind ``monitor conversation`` and the report's examples: one conversation's
stored rows, in one repeatable-read snapshot, turned into a redacted
:class:`~monitor.judges.transcript.Transcript`.

Each read is by conversation id: ``conversations`` by its key, ``events`` through
``ix_events_conversation_id_ts``, ``verdicts`` through its unique key (which starts with the
conversation id).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.judges.transcript import StoredEvent, Transcript, build

_CONVERSATION = text("SELECT * FROM conversations WHERE conversation_id = :cid")
# ts, then turn, then the id: an escalation stored at its message's time comes after it
_EVENTS = text(
    "SELECT body, ingested_at, kept FROM events WHERE conversation_id = :cid"
    " ORDER BY ts, turn NULLS LAST, event_id"
)
_VERDICTS = text(
    "SELECT judge, judge_version, item_id, status, label, score, categories, evidence,"
    " rationale, error, created_at FROM verdicts WHERE conversation_id = :cid"
    " ORDER BY created_at, id"
)


async def load_transcript(engine: AsyncEngine, conversation_id: str) -> Transcript | None:
    """The conversation ``conversation_id`` as stored now, redacted; None when no
    conversation has that id (never written, or removed by retention)."""
    async with engine.connect() as plain:
        conn = await plain.execution_options(isolation_level="REPEATABLE READ")
        row = (await conn.execute(_CONVERSATION, {"cid": conversation_id})).mappings().first()
        if row is None:
            return None
        events = (await conn.execute(_EVENTS, {"cid": conversation_id})).mappings().all()
        verdicts = (await conn.execute(_VERDICTS, {"cid": conversation_id})).mappings().all()
    stored = [StoredEvent(e["body"], e["ingested_at"]) for e in events]
    kept = sum(1 for e in events if e["kept"])
    return build(conversation_id, dict(row), stored, [dict(v) for v in verdicts], kept)
