"""The SQL that stores a new conversation's sampling decision in the batch statement's insert.

The writer decides every conversation of a batch before the statement
(:func:`monitor.ingest.decisions.provisional`) and passes the decisions as the statement's
parameters (:data:`DECISION_PARAMS`, with the policy digest as ``$9``). The ``conversations``
upsert of :mod:`monitor.ingest.rollup_sql` joins them (:data:`DEC`) to its ``agg`` rows and
inserts a new row with its decision only when :data:`SAME_SEGMENT` holds: a decision is a
function of the conversation id and (agent_id, domain, tier), so it is the stored row's own
only when it was made from the row's segment. The update of an existing row never touches the
sampling columns; a row left undecided is decided afterwards from the stored row
(:data:`monitor.ingest.items_sql.SET_DECISIONS`).
"""

from __future__ import annotations

#: the parameter arrays, in ``provisional``'s order: conversation id, the agent, domain and tier
#: the decision was made from, stratum, rate, by_rate, weight
DECISION_PARAMS = (
    "$1::text[], $2::text[], $3::text[], $4::smallint[], $5::text[], $6::float8[], $7::bool[], "
    "$8::float8[]"
)

#: the decisions as a relation (a CTE of the batch statement, named ``dec``)
DEC = f"""SELECT * FROM unnest({DECISION_PARAMS})
    AS d(conversation_id, d_agent, d_domain, d_tier, d_stratum, d_rate, d_by_rate, d_weight)"""

#: true when the decision joined to an ``agg`` row was made from that row's segment
SAME_SEGMENT = (
    "d_agent = agg.agent_id AND d_domain IS NOT DISTINCT FROM agg.domain"
    " AND d_tier IS NOT DISTINCT FROM agg.tier"
)

_STORED = (
    ("sample_stratum", "d_stratum"),
    ("sample_rate", "d_rate"),
    ("sampled_by_rate", "d_by_rate"),
    ("sample_weight", "d_weight"),
    ("sample_policy", "$9::text"),
)

#: the ``conversations`` columns the insert fills, and their values (NULL unless ``k.ok``, the
#: lateral :data:`SAME_SEGMENT` of the row)
DECISION_COLS = tuple(col for col, _ in _STORED)
DECISION_VALUES = ", ".join(f"CASE WHEN k.ok THEN {value} END" for _, value in _STORED)

#: :data:`KEPT_STORED`: those of the conversations ``$1`` whose stored row is kept (the facts and
#: parameters of :data:`PROMOTE`), read before a batch is written so that the later events of a
#: conversation kept already go straight to the kept leaves instead of being written and moved.
#: The promotion, run in the batch transaction after the batch statement: every unkept event
#: (``kept = false``, the days' ``_u`` leaves only) of a conversation of ``$1`` whose stored row
#: is now kept -- sampled by rate, or a fact an enabled always-sample rule looks at: an
#: assistant confidence below ``$2`` (the floor, NULL: none), escalated (``$3``: the rule is
#: on), a failed tool result (``$4``), a feedback (``$5``; any score: the rule's threshold is
#: applied where the conversation is judged), or an exemplar of an alert (``alert_exemplars``,
#: whose evaluator promoted its earlier events) -- moves to the kept leaves (an UPDATE of the
#: partition key moves the row). ``$1``: the batch's conversations not sampled by rate in the
#: writer's decision (a stored decision made under another policy is read here). Returns how
#: many events moved.
KEPT_STORED = """
SELECT conversation_id FROM conversations
WHERE conversation_id = ANY($1::text[])
  AND (sampled_by_rate OR min_confidence < $2::float8 OR ($3::bool AND escalated)
       OR ($4::bool AND tool_errors > 0) OR ($5::bool AND feedback_count > 0)
       OR EXISTS (SELECT 1 FROM alert_exemplars x
                  WHERE x.conversation_id = conversations.conversation_id))
"""
PROMOTE = f"""
WITH promoted AS ({KEPT_STORED}), moved AS (
  UPDATE events e SET kept = true FROM promoted p
  WHERE e.kept = false AND e.conversation_id = p.conversation_id
  RETURNING 1
)
SELECT count(*) FROM moved
"""
