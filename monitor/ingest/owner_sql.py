"""The SQL that keeps a conversation's truth to its own agent (part of the batch statement).

An ``outcome`` or ``feedback`` event labels a conversation's items (its outcome wins over every
judge), so one whose ``agent.id`` is not the conversation's agent is refused: it is not stored
in ``events``, changes no roll-up, outcome or label, and becomes a dead letter with reason
``agent_mismatch`` (field ``agent.id``; its bytes as ``raw``; source ``$10``, the topic). Its
event id stays claimed in ``event_ids``, so a re-delivery is a plain duplicate and the dead
letter is written once.

The conversation's agent (``owner``) is the stored row's ``agent_id``; for a conversation the
batch creates, the agent of its earliest event that is neither an outcome nor feedback (else
its earliest event). The writer holds the conversations' advisory lock before the statement
runs, so a row another write in flight creates is committed (and seen) first. Only the
conversations with an outcome or feedback event in the batch are looked up.

Both ways in define ``stray`` (the refused events' ids, to leave out of ``ins``) and
``refused`` (their rows for the dead letters): the staging path before it inserts
(:data:`STAGED_STRAY`), the direct path, whose COPY stored them already, by deleting them from
``events`` in the same statement (:data:`direct_stray`).
"""

from __future__ import annotations

TRUTH_TYPES = "('outcome', 'feedback')"


def _owner(source: str) -> str:
    return f"""owner AS (
  SELECT b.conversation_id, coalesce(c.agent_id, b.agent_id) AS agent_id FROM (
    SELECT DISTINCT ON (conversation_id) conversation_id, agent_id FROM {source}
    WHERE conversation_id IN (
      SELECT conversation_id FROM {source} WHERE type IN {TRUTH_TYPES})
    ORDER BY conversation_id, type IN {TRUTH_TYPES}, ts
  ) AS b LEFT JOIN conversations c USING (conversation_id)
)"""


def _stray(source: str, columns: str, claimed: str = "TRUE") -> str:
    return f"""stray AS (
  SELECT s.event_id, s.conversation_id, s.ts, s.agent_id, o.agent_id AS owner{columns}
  FROM {source} s JOIN owner o USING (conversation_id)
  WHERE s.type IN {TRUTH_TYPES} AND s.agent_id <> o.agent_id AND {claimed}
)"""


#: the staging path's ``owner`` and ``stray`` (``pick``: the staged batch; only the ids the
#: batch claimed, i.e. not stored before) and ``refused``; goes after ``ids``
STAGED_STRAY = ", ".join(
    (
        _owner("pick"),
        _stray(
            "pick",
            ", s.kafka_partition, s.kafka_offset, s.body",
            "s.event_id IN (SELECT event_id FROM ids)",
        ),
        "refused AS (SELECT * FROM stray)",
    )
)


def direct_stray(table: str) -> str:
    """The direct path's ``owner``, ``stray`` (from ``table``, the batch's roll-up columns) and
    ``refused`` (the stray events deleted from ``events``, where the COPY put them)."""
    return f"""{_owner(table)}, {_stray(table, "")}, refused AS (
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
