"""Postgres side of the judging pipeline: candidates, requests, conversations, verdicts.

- :func:`claim_candidates` picks conversations that are idle, decided, not yet requested and
  sampled (by rate, or by an always-sample rule evaluated here on the stored facts; the stored
  facts narrow the candidates through a partial index, so a round never scans conversations
  that were never sampled), marks them requested (``conversations.judge_requested_at``),
  records a ``judge_requests`` row for each and hands them to a callback (the Kafka publish)
  INSIDE the transaction: when the publish fails, nothing is recorded and they are picked
  again later; when the commit fails after a publish, a request is sent twice and the judge
  worker absorbs it (verdicts are unique per item and judge version).
- :func:`resend_lost` publishes again the requests that got no verdicts long after they were
  sent (lost on the topic: a record batch the consumer could not decode, a record it could
  not parse), a bounded number of times.
- :func:`load_for_judging` reads at most the cap's events of a conversation (its first and last
  ones) and has Postgres summarise the others without sending them (:mod:`.truncation`).
- :func:`write_verdicts` stores verdicts (``ON CONFLICT DO NOTHING``), marks the request judged
  and relabels the conversation's items and calibration sums, in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from monitor.contract.events import AgentEvent, validate_event
from monitor.ingest.items_sql import LOCK_CONVERSATIONS, RELABEL_ITEMS
from monitor.judges.base import Verdict
from monitor.judges.truncation import MAX_TOOL_NAMES, Omitted, split
from monitor.sampling.rules import AlwaysSampleRules


@dataclass(frozen=True)
class JudgeRequest:
    """What goes on the ``judge-requests`` topic (JSON; key = conversation id)."""

    conversation_id: str
    agent_id: str
    reasons: tuple[str, ...]
    requested_at: datetime

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "conversation_id": self.conversation_id,
                "agent_id": self.agent_id,
                "reasons": list(self.reasons),
                "requested_at": self.requested_at.isoformat(),
            }
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> JudgeRequest:
        """Raises ValueError/KeyError on a malformed request."""
        d = json.loads(raw)
        return cls(
            str(d["conversation_id"]),
            str(d["agent_id"]),
            tuple(str(r) for r in d["reasons"]),
            datetime.fromisoformat(d["requested_at"]),
        )


_FACTS = """
SELECT c.conversation_id, c.agent_id, c.sampled_by_rate, c.escalated, c.min_confidence,
       c.tool_errors > 0 AS failed_tool_call,
       (SELECT min((e.body->'feedback'->>'score')::float8) FROM events e
         WHERE e.conversation_id = c.conversation_id AND e.type = 'feedback') AS min_feedback
FROM conversations c
"""

# the partial index ix_conversations_judge_candidates serves exactly this predicate
_CANDIDATES = (
    _FACTS
    + """
WHERE c.judge_requested_at IS NULL AND c.last_ts < $1 AND c.sample_rate IS NOT NULL
  AND (c.sampled_by_rate OR c.escalated OR c.tool_errors > 0 OR c.feedback_count > 0)
ORDER BY c.last_ts
LIMIT $2
FOR UPDATE OF c SKIP LOCKED
"""
)

# the confidence-floor rule depends on configuration, so it has no partial index: it looks at
# conversations idle for less than FLOOR_HORIZON only (the last_ts index bounds the scan)
_LOW_CONFIDENCE = (
    _FACTS
    + """
WHERE c.judge_requested_at IS NULL AND c.last_ts < $1 AND c.last_ts >= $2
  AND c.sample_rate IS NOT NULL AND c.min_confidence < $3
ORDER BY c.last_ts
LIMIT $4
FOR UPDATE OF c SKIP LOCKED
"""
)
FLOOR_HORIZON = timedelta(days=1)

_MARK = """
UPDATE conversations SET judge_requested_at = $2 WHERE conversation_id = ANY($1::text[])
"""

_RECORD = """
INSERT INTO judge_requests (conversation_id, agent_id, reasons, requested_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::timestamptz[])
ON CONFLICT (conversation_id) DO NOTHING
"""


async def claim_candidates(
    pool: asyncpg.Pool,
    rules: AlwaysSampleRules,
    now: datetime,
    idle: timedelta,
    limit: int,
    publish: Callable[[list[JudgeRequest]], Awaitable[None]],
) -> list[JudgeRequest]:
    """Request judging of up to ``limit`` conversations idle since ``now - idle``.

    Returns the requests published and recorded (empty when there is nothing to judge).
    Exceptions of ``publish`` propagate, and nothing is recorded.
    """
    cutoff = now - idle
    async with pool.acquire() as conn, conn.transaction():
        rows = list(await conn.fetch(_CANDIDATES, cutoff, limit))
        floor = rules.confidence_floor
        if floor is not None and len(rows) < limit:
            seen = {r["conversation_id"] for r in rows}
            more = await conn.fetch(
                _LOW_CONFIDENCE, cutoff, cutoff - FLOOR_HORIZON, floor, limit - len(rows)
            )
            rows += [r for r in more if r["conversation_id"] not in seen]
        requests = []
        for r in rows:
            fired = rules.reasons(
                escalated=r["escalated"],
                min_confidence=r["min_confidence"],
                failed_tool_call=r["failed_tool_call"],
                min_feedback=r["min_feedback"],
            )
            reasons = (("rate",) if r["sampled_by_rate"] else ()) + tuple(f.value for f in fired)
            if reasons:
                requests.append(JudgeRequest(r["conversation_id"], r["agent_id"], reasons, now))
        if not requests:
            return []
        await publish(requests)
        await conn.execute(_MARK, [q.conversation_id for q in requests], now)
        await conn.execute(
            _RECORD,
            [q.conversation_id for q in requests],
            [q.agent_id for q in requests],
            [json.dumps(list(q.reasons)) for q in requests],
            [q.requested_at for q in requests],
        )
    return requests


# requests published but never judged: their record was lost on the topic (a batch the
# consumer could not decode, a record it could not parse) or its judging never finished; the
# partial index ix_judge_requests_pending holds only such rows
_LOST = """
SELECT conversation_id, agent_id, reasons FROM judge_requests
WHERE judged_at IS NULL AND requested_at >= $2 AND coalesce(resent_at, requested_at) < $1
  AND resends < $3
ORDER BY requested_at
LIMIT $4
FOR UPDATE SKIP LOCKED
"""

_RESENT = """
UPDATE judge_requests SET resends = resends + 1, resent_at = $2
WHERE conversation_id = ANY($1::text[])
"""

RESEND_HORIZON = timedelta(days=1)  # a request older than this is not sent again


async def resend_lost(
    pool: asyncpg.Pool,
    now: datetime,
    after: timedelta,
    most: int,
    limit: int,
    publish: Callable[[list[JudgeRequest]], Awaitable[None]],
) -> list[JudgeRequest]:
    """Publish again up to ``limit`` requests sent (or last re-sent) before ``now - after``
    that have no verdicts yet, each at most ``most`` times and only within
    :data:`RESEND_HORIZON` of its first request; counts them in ``judge_requests.resends``.

    A request still queued behind a backlog is sent twice: the judge worker absorbs it (only
    judges without a verdict run). Exceptions of ``publish`` propagate, and nothing is recorded.
    """
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(_LOST, now - after, now - RESEND_HORIZON, most, limit)
        requests = [
            JudgeRequest(r["conversation_id"], r["agent_id"], tuple(_json_list(r["reasons"])), now)
            for r in rows
        ]
        if not requests:
            return []
        await publish(requests)
        await conn.execute(_RESENT, [q.conversation_id for q in requests], now)
    return requests


def _json_list(value: object) -> list[str]:
    """A JSONB array as asyncpg returns it (text unless a codec is set)."""
    items = json.loads(value) if isinstance(value, str) else value
    return [str(x) for x in items] if isinstance(items, list) else []


@dataclass(frozen=True)
class StoredConversation:
    """What the judges read of one stored conversation: the JSON bodies of the events judged
    (in (ts, event_id) order; parse them with :func:`parse_bodies`, off the event loop) and,
    when the conversation is above the cap, the summary of the events left out."""

    bodies: list[str]
    omitted: Omitted | None = None


_COUNT = "SELECT count(*) FROM events WHERE conversation_id = $1"
_HEAD = """
SELECT body, ts, event_id FROM events WHERE conversation_id = $1
ORDER BY ts, event_id LIMIT $2
"""
_TAIL = """
SELECT body, ts, event_id FROM events WHERE conversation_id = $1
ORDER BY ts DESC, event_id DESC LIMIT $2
"""
_GAP = "conversation_id = $1 AND (ts, event_id) > ($2, $3) AND (ts, event_id) < ($4, $5)"
_GAP_TYPES = f"SELECT type, count(*) AS n, min(ts) AS lo, max(ts) AS hi FROM events WHERE {_GAP}"
_GAP_TYPES += " GROUP BY type"
_GAP_TOOLS = f"""
SELECT tool_name, tool_ok, count(*) AS n FROM events WHERE {_GAP} AND type = 'tool_result'
GROUP BY tool_name, tool_ok ORDER BY n DESC, tool_name LIMIT {2 * MAX_TOOL_NAMES}
"""


async def load_for_judging(
    pool: asyncpg.Pool, conversation_id: str, max_events: int
) -> StoredConversation:
    """The events of one conversation the judges read: all of them up to ``max_events``, else
    the first and last ones (:func:`~monitor.judges.truncation.split`) and a summary of the
    others computed by Postgres (they are never loaded). One repeatable-read snapshot."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        total = int(await conn.fetchval(_COUNT, conversation_id) or 0)
        head, tail = split(total, max_events)
        first = await conn.fetch(_HEAD, conversation_id, head)
        if not tail:
            return StoredConversation([r["body"] for r in first])
        last = list(reversed(await conn.fetch(_TAIL, conversation_id, tail)))
        bounds = (first[-1]["ts"], first[-1]["event_id"], last[0]["ts"], last[0]["event_id"])
        types = await conn.fetch(_GAP_TYPES, conversation_id, *bounds)
        tools = await conn.fetch(_GAP_TOOLS, conversation_id, *bounds)
    ok = {r["tool_name"]: int(r["n"]) for r in tools if r["tool_ok"]}
    failed = {r["tool_name"]: int(r["n"]) for r in tools if not r["tool_ok"]}
    omitted = Omitted(
        events=sum(int(r["n"]) for r in types),
        total=len(first) + len(last) + sum(int(r["n"]) for r in types),
        max_events=max_events,
        resume_at=str(last[0]["event_id"]),
        first_ts=min((r["lo"] for r in types), default=None),
        last_ts=max((r["hi"] for r in types), default=None),
        by_type={str(r["type"]): int(r["n"]) for r in types},
        tool_successes=dict(list(ok.items())[:MAX_TOOL_NAMES]),
        tool_failures=dict(list(failed.items())[:MAX_TOOL_NAMES]),
    )
    return StoredConversation([r["body"] for r in first + last], omitted)


def parse_bodies(bodies: Sequence[str]) -> list[AgentEvent]:
    """Stored JSON bodies -> events (CPU only: the judge loop runs it in its worker thread)."""
    return [validate_event(json.loads(b)) for b in bodies]


async def agent_uses_tools(pool: asyncpg.Pool, agent_id: str) -> bool:
    """True when any stored conversation of ``agent_id`` has a tool call or a tool result."""
    async with pool.acquire() as conn:
        found = await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM conversations WHERE agent_id = $1"
            " AND (tool_calls > 0 OR tool_results > 0))",
            agent_id,
        )
    return bool(found)


async def judged_by(pool: asyncpg.Pool, conversation_id: str) -> set[tuple[str, str]]:
    """``(judge, judge_version)`` pairs that already have verdicts on the conversation."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT DISTINCT judge, judge_version FROM verdicts WHERE conversation_id = $1",
            conversation_id,
        )
    return {(r["judge"], r["judge_version"]) for r in rows}


_INSERT_VERDICTS = """
INSERT INTO verdicts (conversation_id, item_id, agent_id, judge, judge_version, status, label,
                      score, categories, evidence, rationale, error, latency_ms)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::smallint[], $8::float8[], $9::jsonb[], $10::jsonb[], $11::text[],
                     $12::text[], $13::float8[])
ON CONFLICT ON CONSTRAINT uq_verdicts_item_judge DO NOTHING
"""


#: verdict rows per INSERT statement (one transaction still covers them all)
VERDICT_CHUNK = 2000


def verdict_columns(
    agent_by_conversation: Mapping[str, str], verdicts: Sequence[Verdict]
) -> list[list[Any]]:
    """The 13 columns of ``verdicts`` as :func:`write_verdict_columns` inserts them (CPU only:
    the evidence serialised to JSON; the judge loop runs it in its worker thread)."""
    cols: list[list[Any]] = [[] for _ in range(13)]
    for v in verdicts:
        values = (
            v.conversation_id,
            v.item_id or "",
            agent_by_conversation[v.conversation_id],
            v.judge,
            v.judge_version,
            v.status,
            v.label,
            v.score,
            json.dumps(list(v.categories)),
            json.dumps(v.evidence, default=str),
            v.rationale,
            v.error,
            float(v.latency_ms),
        )
        for col, value in zip(cols, values, strict=True):
            col.append(value)
    return cols


async def write_verdicts(
    pool: asyncpg.Pool, agent_by_conversation: dict[str, str], verdicts: Sequence[Verdict]
) -> tuple[int, int]:
    """Store ``verdicts``, mark their conversations judged, relabel their items.

    Returns ``(verdicts offered, items relabelled)``. One transaction: all or nothing.
    """
    cols = verdict_columns(agent_by_conversation, verdicts)
    return await write_verdict_columns(pool, sorted(agent_by_conversation), cols)


async def write_verdict_columns(
    pool: asyncpg.Pool, conversation_ids: Sequence[str], cols: list[list[Any]]
) -> tuple[int, int]:
    """:func:`write_verdicts` with the columns already built (:func:`verdict_columns`);
    ``conversation_ids``: every conversation judged (those without a verdict included)."""
    cids = sorted(conversation_ids)
    rows = len(cols[0])
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(LOCK_CONVERSATIONS, cids)
        for lo in range(0, rows, VERDICT_CHUNK):
            await conn.execute(_INSERT_VERDICTS, *(c[lo : lo + VERDICT_CHUNK] for c in cols))
        await conn.execute(
            "UPDATE judge_requests SET judged_at = now() WHERE conversation_id = ANY($1::text[])",
            cids,
        )
        row = await conn.fetchrow(RELABEL_ITEMS, cids, cids)
    assert row is not None
    return rows, int(row["relabelled"])
