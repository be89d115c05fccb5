"""The SQL that keeps a conversation's truth to its own agent (part of the batch statement).

An ``outcome`` or ``feedback`` event labels a conversation's items (its outcome wins over every
judge), so one whose ``agent.id`` is not the conversation's agent is refused: it is not stored
in ``events``, changes no roll-up, outcome or label, and becomes a dead letter with reason
``agent_mismatch`` (field ``agent.id``; its bytes as ``raw``; source ``$10``, the topic). Its
event id stays claimed in ``event_ids``, so a re-delivery is a plain duplicate and the dead
letter is written once.

The conversation's agent (``owner``) is the agent of its earliest event by ts, as the
``conversations`` row's ``agent_id`` is chosen: the stored row's, unless the batch holds an
earlier non-truth event of the conversation; then (and for a conversation the batch creates)
the agent of the batch's earliest non-truth events of it (an outcome or feedback event is
refused when several agents share that earliest ts; one whose conversation has no other event
yet is accepted, and its agent becomes the conversation's). So a later message of another
agent (a handoff) does not make the conversation that agent's, whichever batch brings it; an
outcome that arrives before any event of its own agent while only another agent's message is
stored is refused (it cannot be told from that agent's conversation labelled by a stranger).
The writer holds the conversations' advisory lock before the statement runs, so a row another
write in flight creates is committed (and seen) first. Only the conversations of the batch's
outcome and feedback events are looked up.

Both ways in define ``stray`` (the refused events' ids, to leave out of ``ins``) and
``refused`` (their rows for the dead letters): the staging path before it inserts
(:data:`STAGED_STRAY`), the direct path, whose COPY stored them already, by deleting them from
``events`` in the same statement (:data:`direct_stray`).
"""

from __future__ import annotations

TRUTH_TYPES = "('outcome', 'feedback')"


def _stray(source: str) -> str:
    """The refused events of ``source``: its outcome and feedback rows whose agent is not
    their conversation's (``owner``). The owner is the agent of the conversation's earliest
    event by ts: the stored row's ``agent_id`` (its ``first_ts``) unless the batch has a
    non-truth event of the conversation strictly earlier, else the agent of the batch's
    earliest non-truth events of it (``lo`` = ``hi``; several agents at that ts: refused).
    ``f`` reads the batch with hashed aggregates and a hash join, no sort of the batch."""
    return f"""stray AS (
  SELECT t.event_id, t.conversation_id, t.ts, t.agent_id,
    CASE WHEN k.stored THEN c.agent_id WHEN t.agent_id <> f.lo THEN f.lo ELSE f.hi END AS owner
  FROM {source} t
  LEFT JOIN (
    SELECT b.conversation_id, g.first_at, min(b.agent_id) AS lo, max(b.agent_id) AS hi
    FROM {source} b JOIN (
      SELECT conversation_id, min(ts) AS first_at FROM {source}
      WHERE type NOT IN {TRUTH_TYPES} GROUP BY conversation_id
    ) AS g ON b.conversation_id = g.conversation_id AND b.ts = g.first_at
    WHERE b.type NOT IN {TRUTH_TYPES} GROUP BY b.conversation_id, g.first_at
  ) AS f USING (conversation_id)
  LEFT JOIN conversations c USING (conversation_id)
  CROSS JOIN LATERAL (
    SELECT c.agent_id IS NOT NULL AND (f.first_at IS NULL OR c.first_ts <= f.first_at) AS stored
  ) AS k
  WHERE t.type IN {TRUTH_TYPES} AND CASE WHEN k.stored
    THEN t.agent_id <> c.agent_id ELSE coalesce(t.agent_id <> f.lo OR t.agent_id <> f.hi, false) END
)"""


#: the staging path's ``stray`` (from ``pick``, the staged batch) and ``refused`` (those the
#: batch claimed, i.e. not stored before: a re-delivered one is a plain duplicate); goes after
#: ``ids``
STAGED_STRAY = f"""{_stray("pick")}, refused AS (
  SELECT s.conversation_id, s.agent_id, s.owner, p.kafka_partition, p.kafka_offset, p.body
  FROM stray s JOIN pick p USING (event_id)
  WHERE p.event_key IN (SELECT event_key FROM ids)
)"""


def direct_stray(table: str) -> str:
    """The direct path's ``stray`` (from ``table``, the batch's roll-up columns) and
    ``refused`` (the stray events deleted from ``events``, where the COPY put them)."""
    return f"""{_stray(table)}, refused AS (
  DELETE FROM events e USING stray s
  WHERE e.conversation_id = s.conversation_id AND e.ts = s.ts AND e.event_id = s.event_id
  RETURNING s.conversation_id, s.agent_id, s.owner, e.kafka_partition, e.kafka_offset, e.body
)"""


#: the dead letters of ``refused`` (one per event; a re-delivered one adds nothing)
MISMATCH = """mismatch AS (
  INSERT INTO dead_letters
    (source, source_partition, source_offset, reason, field, detail, raw, raw_md5)
  SELECT $10::text, kafka_partition, kafka_offset, 'agent_mismatch', 'agent.id',
    'conversation ' || conversation_id || ' belongs to agent ' || owner || ', not '
      || agent_id || ': an outcome or feedback event of another agent is not stored',
    raw, md5(raw)
  FROM (SELECT *, convert_to(body::text, 'UTF8') AS raw FROM refused) AS r
  ON CONFLICT (source, source_partition, source_offset, raw_md5) DO NOTHING
  RETURNING 1
)"""
