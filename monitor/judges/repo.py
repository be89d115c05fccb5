"""Postgres side of the judging pipeline: candidates, requests, conversations, verdicts.

- :func:`claim_candidates` picks conversations that are idle (by event time and by arrival,
  :mod:`.rejudge`), decided, not yet requested and sampled (by rate, or by an always-sample rule
  evaluated here on the stored facts; the stored facts narrow the candidates through a partial
  index, so a round never scans conversations that were never sampled), marks them requested
  (``conversations.judge_requested_at``), records a ``judge_requests`` row for each and hands
  them to a callback (the Kafka publish) INSIDE the transaction: when the publish fails,
  nothing is recorded and they are picked again later; when the commit fails after a publish,
  a request is sent twice and the judge worker absorbs it (verdicts are unique per item and
  judge version).
- :func:`claim_rejudges` picks, the same way, judged conversations that stored more events
  than their verdicts cover, idle again, within the re-judge bounds (:mod:`.rejudge`), through
  the partial index of ``conversations.judge_watch``.
- :func:`resend_lost` publishes again the requests that got no verdicts long after they were
  sent (lost on the topic: a record batch the consumer could not decode, a record it could
  not parse), a bounded number of times.
- :func:`load_for_judging` reads at most the cap's events of a conversation (its first and last
  ones) and has Postgres summarise the others without sending them (:mod:`.truncation`), with
  the conversation's stored event count and the count its verdicts cover, in one snapshot.
- :func:`write_verdicts` stores verdicts (``ON CONFLICT DO NOTHING``; a re-judgement first
  deletes the conversation's verdicts), marks the request judged with the events it covered
  and relabels the conversation's items and calibration sums, in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import asyncpg

from monitor.contract.events import AgentEvent, validate_event
from monitor.ingest.items_sql import LOCK_CONVERSATIONS, RELABEL_ITEMS
from monitor.judges.base import Verdict
from monitor.judges.rejudge import JudgeTiming
from monitor.judges.truncation import MAX_TOOL_NAMES, Omitted, split
from monitor.sampling.rules import AlwaysSampleRules


@dataclass(frozen=True)
class JudgeRequest:
    """What goes on the ``judge-requests`` topic (JSON; key = conversation id). ``rejudge``:
    0 for the first request of a conversation, n for its n-th re-judgement (absent in the
    JSON of a request written before re-judging existed: 0)."""

    conversation_id: str
    agent_id: str
    reasons: tuple[str, ...]
    requested_at: datetime
    rejudge: int = 0

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "conversation_id": self.conversation_id,
                "agent_id": self.agent_id,
                "reasons": list(self.reasons),
                "requested_at": self.requested_at.isoformat(),
                "rejudge": self.rejudge,
            }
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> JudgeRequest:
        """Raises ValueError/KeyError/TypeError on a malformed request."""
        d = json.loads(raw)
        return cls(
            str(d["conversation_id"]),
            str(d["agent_id"]),
            tuple(str(r) for r in d["reasons"]),
            datetime.fromisoformat(d["requested_at"]),
            int(d.get("rejudge", 0)),
        )


_FACTS = """
SELECT c.conversation_id, c.agent_id, c.sampled_by_rate, c.escalated, c.min_confidence,
       c.tool_errors > 0 AS failed_tool_call,
       (SELECT min((e.body->'feedback'->>'score')::float8) FROM events e
         WHERE e.conversation_id = c.conversation_id AND e.type = 'feedback') AS min_feedback
FROM conversations c
"""

#: idle by arrival (monitor.judges.rejudge.is_idle): ``updated_at`` is the store's now() of the
#: newest write that stored one of the conversation's events, compared with the store's clock
_ARRIVED_BEFORE = "c.updated_at < now() - make_interval(secs => {})"

# the partial index ix_conversations_judge_candidates serves exactly this predicate
_CANDIDATES = (
    _FACTS
    + f"""
WHERE c.judge_requested_at IS NULL AND c.last_ts < $1 AND c.sample_rate IS NOT NULL
  AND (c.sampled_by_rate OR c.escalated OR c.tool_errors > 0 OR c.feedback_count > 0)
  AND {_ARRIVED_BEFORE.format("$3")}
ORDER BY c.last_ts
LIMIT $2
FOR UPDATE OF c SKIP LOCKED
"""
)

# the confidence-floor rule depends on configuration, so it has no partial index: it looks at
# conversations idle for less than FLOOR_HORIZON only (the last_ts index bounds the scan)
_LOW_CONFIDENCE = (
    _FACTS
    + f"""
WHERE c.judge_requested_at IS NULL AND c.last_ts < $1 AND c.last_ts >= $2
  AND c.sample_rate IS NOT NULL AND c.min_confidence < $3
  AND {_ARRIVED_BEFORE.format("$5")}
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
    timing: JudgeTiming,
    limit: int,
    publish: Callable[[list[JudgeRequest]], Awaitable[None]],
) -> list[JudgeRequest]:
    """Request judging of up to ``limit`` conversations never requested and idle at ``now``
    (by event time, and by arrival on the store's clock: :func:`~.rejudge.is_idle`).

    Returns the requests published and recorded (empty when there is nothing to judge).
    Exceptions of ``publish`` propagate, and nothing is recorded.
    """
    cutoff, arrival = now - timedelta(seconds=timing.idle_s), timing.arrival_idle_s
    async with pool.acquire() as conn, conn.transaction():
        rows = list(await conn.fetch(_CANDIDATES, cutoff, limit, arrival))
        floor = rules.confidence_floor
        if floor is not None and len(rows) < limit:
            seen = {r["conversation_id"] for r in rows}
            more = await conn.fetch(
                _LOW_CONFIDENCE, cutoff, cutoff - FLOOR_HORIZON, floor, limit - len(rows), arrival
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


# judged conversations that stored more events than their verdicts cover (the partial index
# ix_conversations_rejudge holds only them: its predicate is the first condition), idle again
# (monitor.judges.rejudge.due: REJUDGE)
_REJUDGE = f"""
SELECT c.conversation_id, c.agent_id, r.reasons, r.rejudges
FROM conversations c JOIN judge_requests r USING (conversation_id)
WHERE c.event_count > c.judge_watch AND c.last_ts < $1 AND {_ARRIVED_BEFORE.format("$2")}
  AND r.judged_at < now() - make_interval(secs => $3) AND r.rejudges < $4
ORDER BY c.updated_at
LIMIT $5
FOR UPDATE OF c SKIP LOCKED
"""

# pending again: no longer watched, the request not judged (resend_lost may send it again)
_MARK_REJUDGE = """
UPDATE conversations SET judge_requested_at = $2, judge_watch = NULL
WHERE conversation_id = ANY($1::text[])
"""
_RECORD_REJUDGE = """
UPDATE judge_requests SET requested_at = $2, judged_at = NULL, resends = 0, resent_at = NULL,
  rejudges = rejudges + 1
WHERE conversation_id = ANY($1::text[])
"""


async def claim_rejudges(
    pool: asyncpg.Pool,
    now: datetime,
    timing: JudgeTiming,
    limit: int,
    publish: Callable[[list[JudgeRequest]], Awaitable[None]],
) -> list[JudgeRequest]:
    """Request judging again of up to ``limit`` judged conversations that stored events since
    their verdicts, are idle at ``now`` and within the re-judge bounds of ``timing``
    (:func:`~.rejudge.due`: ``REJUDGE``), with the reasons of their first request; marks them
    pending (not watched, ``judge_requests.judged_at`` cleared, ``rejudges`` counted).

    Exceptions of ``publish`` propagate, and nothing is recorded.
    """
    cutoff = now - timedelta(seconds=timing.idle_s)
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(
            _REJUDGE,
            cutoff,
            timing.arrival_idle_s,
            timing.rejudge_gap_s,
            timing.rejudge_most,
            limit,
        )
        requests = [_request(r, now, int(r["rejudges"]) + 1) for r in rows]
        if not requests:
            return []
        await publish(requests)
        ids = [q.conversation_id for q in requests]
        await conn.execute(_MARK_REJUDGE, ids, now)
        await conn.execute(_RECORD_REJUDGE, ids, now)
    return requests


# requests published but never judged: their record was lost on the topic (a batch the
# consumer could not decode, a record it could not parse) or its judging never finished; the
# partial index ix_judge_requests_pending holds only such rows
_LOST = """
SELECT conversation_id, agent_id, reasons, rejudges FROM judge_requests
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
        requests = [_request(r, now, int(r["rejudges"])) for r in rows]
        if not requests:
            return []
        await publish(requests)
        await conn.execute(_RESENT, [q.conversation_id for q in requests], now)
    return requests


def _request(row: asyncpg.Record, now: datetime, rejudge: int) -> JudgeRequest:
    """The request of a stored ``judge_requests`` row, sent at ``now``."""
    reasons = tuple(_json_list(row["reasons"]))
    return JudgeRequest(row["conversation_id"], row["agent_id"], reasons, now, rejudge)


def _json_list(value: object) -> list[str]:
    """A JSONB array as asyncpg returns it (text unless a codec is set)."""
    items = json.loads(value) if isinstance(value, str) else value
    return [str(x) for x in items] if isinstance(items, list) else []


@dataclass(frozen=True)
class StoredConversation:
    """What the judges read of one stored conversation: the JSON bodies of the events judged
    (in (ts, event_id) order; parse them with :func:`parse_bodies`, off the event loop) and,
    when the conversation is above the cap, the summary of the events left out. ``events``:
    its stored event count (``conversations.event_count``, 0 without a row); ``judged_events``:
    the count its stored verdicts cover (None: never judged); ``rejudges``: how many times it
    was sent to the judges again; all from the snapshot the bodies were read in."""

    bodies: list[str]
    omitted: Omitted | None = None
    events: int = 0
    judged_events: int | None = None
    rejudges: int = 0


_COUNT = """
SELECT (SELECT count(*) FROM events WHERE conversation_id = $1) AS total,
       (SELECT event_count FROM conversations WHERE conversation_id = $1) AS events,
       r.judged_events, r.rejudges
FROM (SELECT 1) AS one
LEFT JOIN judge_requests r ON r.conversation_id = $1
"""
_HEAD = """
SELECT body, ts, event_id FROM events WHERE conversation_id = $1
ORDER BY ts, event_id LIMIT $2
"""
_TAIL = """
SELECT body, ts, event_id FROM events WHERE conversation_id = $1
ORDER BY ts DESC, event_id DESC LIMIT $2
"""
_GAP = "conversation_id = $1 AND (ts, event_id) > ($2, $3) AND (ts, event_id) < ($4, $5)"
_GAP_TYPES = f"""
SELECT type, count(*) AS n, min(ts) AS lo, max(ts) AS hi,
       count(*) FILTER (WHERE NOT tool_ok) AS failed
FROM events WHERE {_GAP}"""
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
    others computed by Postgres (they are never loaded), with its stored and judged event
    counts (:class:`StoredConversation`). One repeatable-read snapshot."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        counts = await conn.fetchrow(_COUNT, conversation_id)
        assert counts is not None
        judged = counts["judged_events"]
        stored = partial(
            StoredConversation,
            events=int(counts["events"] or 0),
            judged_events=None if judged is None else int(judged),
            rejudges=int(counts["rejudges"] or 0),
        )
        head, tail = split(int(counts["total"]), max_events)
        first = await conn.fetch(_HEAD, conversation_id, head)
        if not tail:
            return stored([r["body"] for r in first])
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
        after=str(first[-1]["event_id"]),
        failed_results=sum(int(r["failed"]) for r in types if r["type"] == "tool_result"),
    )
    return stored([r["body"] for r in first + last], omitted)


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


@dataclass(frozen=True)
class Judgement:
    """What one judgement of a conversation covered, as :func:`write_verdict_columns` records
    it: ``events``, the conversation's stored events in the snapshot the judges read
    (``judge_requests.judged_events``); ``replaces``: its verdicts replace every stored
    verdict of the conversation (:func:`~.rejudge.replaces`); ``watch``: the
    ``conversations.judge_watch`` to store (:func:`~.rejudge.watch`)."""

    conversation_id: str
    events: int
    replaces: bool = False
    watch: int | None = None


async def write_verdicts(
    pool: asyncpg.Pool,
    agent_by_conversation: dict[str, str],
    verdicts: Sequence[Verdict],
    judgements: Sequence[Judgement] = (),
) -> tuple[int, int]:
    """Store ``verdicts``, mark their conversations judged (with what ``judgements`` covered),
    relabel their items.

    Returns ``(verdicts offered, items relabelled)``. One transaction: all or nothing.
    """
    cols = verdict_columns(agent_by_conversation, verdicts)
    return await write_verdict_columns(pool, sorted(agent_by_conversation), cols, judgements)


# a judgement's record: whether (above what count) the conversation is watched for growth, then
# the events it covered. The conversation rows first: the scheduler locks them before their
# judge_requests rows, and so does this writer (no lock cycle between the two)
_WATCH = """
UPDATE conversations c SET judge_watch = j.watch
FROM unnest($1::text[], $2::int[]) AS j(conversation_id, watch)
WHERE c.conversation_id = j.conversation_id
"""
_JUDGED = """
UPDATE judge_requests r SET judged_at = now(),
  judged_events = coalesce(j.events, r.judged_events)
FROM unnest($1::text[], $2::int[]) AS j(conversation_id, events)
WHERE r.conversation_id = j.conversation_id
"""


async def write_verdict_columns(
    pool: asyncpg.Pool,
    conversation_ids: Sequence[str],
    cols: list[list[Any]],
    judgements: Sequence[Judgement] = (),
) -> tuple[int, int]:
    """:func:`write_verdicts` with the columns already built (:func:`verdict_columns`);
    ``conversation_ids``: every conversation judged (those without a verdict included);
    ``judgements``: what those judgements covered (a conversation without one keeps its
    judged count and watch). The stored verdicts of a conversation whose judgement
    ``replaces`` are deleted first, so its verdicts are the new judgement's, and its items are
    relabelled from them."""
    cids = sorted(conversation_ids)
    rows = len(cols[0])
    judged = sorted(judgements, key=lambda j: j.conversation_id)
    replaced = [j.conversation_id for j in judged if j.replaces]
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(LOCK_CONVERSATIONS, cids)
        if replaced:
            await conn.execute(
                "DELETE FROM verdicts WHERE conversation_id = ANY($1::text[])", replaced
            )
        for lo in range(0, rows, VERDICT_CHUNK):
            await conn.execute(_INSERT_VERDICTS, *(c[lo : lo + VERDICT_CHUNK] for c in cols))
        if judged:
            await conn.execute(
                _WATCH, [j.conversation_id for j in judged], [j.watch for j in judged]
            )
        events = {j.conversation_id: j.events for j in judged}
        await conn.execute(_JUDGED, cids, [events.get(c) for c in cids])
        row = await conn.fetchrow(RELABEL_ITEMS, cids, cids)
    assert row is not None
    return rows, int(row["relabelled"])
