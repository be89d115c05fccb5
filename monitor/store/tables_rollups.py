"""Read roll-ups kept at ingest so that no dashboard or CLI read scans ``events``.

All of them but the verdict roll-ups are maintained by the batch statement of
:mod:`monitor.ingest.rollup_sql`, from the rows it actually inserted (a replayed event changes
nothing), in the same transaction:

``event_minutes``
    Events per (minute of ``ingested_at``, type, agent, domain, tier). Any time range aligned
    to minutes, and any roll-up of types or segments, is the sum of its rows. Missing domain /
    tier are stored as ``''`` / ``0`` (key columns); ``v_event_minutes`` shows them as NULL.
``ingest_delay_bins``
    Histogram of the ingest delay (``ingested_at - ts`` in seconds) per minute of
    ``ingested_at``: bucket 0 holds delays <= 1 ms (and negative ones, clock skew), bucket
    ``b`` in 1 .. 119 holds ``(1 ms * 2^((b-1)/4), 1 ms * 2^(b/4)]`` (each about 19 % wide),
    bucket 120 everything above 1 ms * 2^(119/4) (about 10 days). A quantile read from it is
    the upper edge of the bucket that holds it, at most 19 % above the exact value.
``escalation_bins``
    Sampled conversations (``sample_weight > 0``) counted per window (``1h`` / ``1d``) of
    ``first_ts`` and escalation key: kind (0 conversation, 1 its timing, 2 / 3 its seconds /
    turns alone), segment (``''`` / ``0`` for a missing domain, version, tier), minimum
    confidence in thousandths, escalated, outcome, sampling weight, turns and seconds to
    escalation. Kept from the before/after image of every changed conversation
    (:mod:`monitor.ingest.escalation_sql`, which also says what is exact); the escalation
    reads (CLI, alerts, dashboards) sum it instead of reading one row per conversation.
``conversation_minutes``
    Every conversation (sampled or not) summed per (minute of ``first_ts``, agent, domain,
    tier): conversations, escalated, with an outcome, succeeded, with a minimum confidence and
    its sum in millionths, tool errors and tool results. Kept from the same before/after images
    (:mod:`monitor.ingest.conversation_minutes_sql`); the pipeline dashboard's conversation
    panels read it.
``segment_values``
    Every agent id, domain and tier (as text) ever stored on a conversation, by ``kind``
    (``agent`` / ``domain`` / ``tier``): the options of the dashboards' template variables.
``verdict_minutes``, ``verdict_category_minutes``, ``verdict_pairs``
    ``verdicts`` summed per whole minute of ``created_at`` (counts and a latency histogram;
    categories; per conversation x judge x version, with the flags the outcome-comparing panels
    read). Kept by statement-level triggers on ``verdicts`` (migration 0039, which says what
    each holds), so every writer of verdicts, re-judging and retention included, keeps them
    equal to a recount; the judges dashboard reads them.
``verdict_truth``, ``verdict_truth_minutes``
    The labelled pairs whose conversation has an outcome (flagged? failed? the conversation's
    only one for its judge version?) and the per-minute counts of those that are: kept by
    triggers on ``verdicts`` and on ``conversations`` (migration 0040), so re-judging, late or
    changed outcomes and retention keep them equal to a recount; the judges dashboard's
    precision and ground-truth panels read them.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Double,
    Index,
    Integer,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    text,
)

from monitor.store.tables import TS, metadata, required

#: delay histogram: the smallest bucket's upper edge (s), buckets per doubling, the last bucket
DELAY_BASE_S = 0.001
DELAY_PER_DOUBLING = 4
DELAY_LAST_BUCKET = 120
#: escalation_bins' seconds-to-escalation histogram: smallest bucket's upper edge (s), buckets
#: per doubling (monitor.ingest.escalation_sql)
SECONDS_BASE = 0.001
SECONDS_PER_DOUBLING = 16

event_minutes = Table(
    "event_minutes",
    metadata,
    required("minute", TS),
    required("type", Text),
    required("agent_id", Text),
    required("domain", Text, server_default=""),
    required("tier", SmallInteger, server_default="0"),
    required("events", BigInteger),
    PrimaryKeyConstraint("minute", "type", "agent_id", "domain", "tier", name="pk_event_minutes"),
)

ingest_delay_bins = Table(
    "ingest_delay_bins",
    metadata,
    required("minute", TS),
    required("bucket", SmallInteger),
    required("events", BigInteger),
    PrimaryKeyConstraint("minute", "bucket", name="pk_ingest_delay_bins"),
)

#: the summed columns of ``conversation_minutes`` (monitor.ingest.conversation_minutes_sql)
CONVERSATION_MINUTE_SUMS = (
    "conversations",
    "escalated",
    "with_outcome",
    "succeeded",
    "with_confidence",
    "confidence_micro",
    "tool_errors",
    "tool_results",
)

conversation_minutes = Table(
    "conversation_minutes",
    metadata,
    required("minute", TS),
    required("agent_id", Text),
    required("domain", Text),
    required("tier", SmallInteger),
    *(required(name, BigInteger) for name in CONVERSATION_MINUTE_SUMS),
    PrimaryKeyConstraint("minute", "agent_id", "domain", "tier", name="pk_conversation_minutes"),
)

segment_values = Table(
    "segment_values",
    metadata,
    required("kind", Text),
    required("value", Text),
    PrimaryKeyConstraint("kind", "value", name="pk_segment_values"),
)

#: ``escalation_bins``' key within a window, in key order (monitor.ingest.escalation_sql)
ESCALATION_KEY = (
    "kind",
    "agent_id",
    "agent_version",
    "domain",
    "tier",
    "conf_milli",
    "escalated",
    "outcome",
    "weight",
    "turns",
    "seconds_bucket",
)

escalation_bins = Table(
    "escalation_bins",
    metadata,
    required("resolution", Text),
    required("window_start", TS),
    required("kind", SmallInteger),
    required("agent_id", Text),
    required("agent_version", Text),
    required("domain", Text),
    required("tier", SmallInteger),
    required("conf_milli", SmallInteger),
    required("escalated", Boolean),
    required("outcome", SmallInteger),
    required("weight", Double),
    required("turns", Integer),
    required("seconds_bucket", SmallInteger),
    required("conversations", BigInteger),
    PrimaryKeyConstraint("resolution", "window_start", *ESCALATION_KEY, name="pk_escalation_bins"),
    # "Time to escalation per agent" reads the hourly seconds marginals of the range from this
    # index alone (migration 0038), not the heap of every kind
    Index(
        "ix_escalation_bins_seconds_1h",
        "window_start",
        postgresql_include=["agent_id", "domain", "tier", "seconds_bucket", "conversations"],
        postgresql_where=text("resolution = '1h' AND kind = 2"),
    ),
)

# The three verdict roll-ups are kept by triggers on ``verdicts`` (migration 0039, which says
# what each holds): every writer of verdicts, retention included, keeps them in step.
_VERDICT_SEGMENT = ("agent_id", "domain", "tier")

verdict_pairs = Table(
    "verdict_pairs",
    metadata,
    required("conversation_id", Text),
    required("judge", Text),
    required("judge_version", Text),
    required("minute", TS),
    required("agent_id", Text),
    required("domain", Text),
    required("tier", SmallInteger),
    required("verdicts", Integer),
    required("labelled", Integer),
    required("flagged", Integer),
    PrimaryKeyConstraint(
        "conversation_id", "judge", "judge_version", "minute", name="pk_verdict_pairs"
    ),
    # the outcome-comparing judges panels read the labelled pairs of a range from this index
    Index(
        "ix_verdict_pairs_labelled",
        "minute",
        postgresql_include=[
            "judge",
            "judge_version",
            "conversation_id",
            "agent_id",
            "domain",
            "tier",
            "flagged",
        ],
        postgresql_where=text("labelled > 0"),
    ),
)

verdict_minutes = Table(
    "verdict_minutes",
    metadata,
    required("minute", TS),
    required("agent_id", Text),
    required("domain", Text),
    required("tier", SmallInteger),
    required("judge", Text),
    required("judge_version", Text),
    required("status", Text),
    required("bucket", SmallInteger),
    required("verdicts", BigInteger),
    required("latency_ms", Double),
    PrimaryKeyConstraint(
        "minute",
        *_VERDICT_SEGMENT,
        "judge",
        "judge_version",
        "status",
        "bucket",
        name="pk_verdict_minutes",
    ),
)

verdict_category_minutes = Table(
    "verdict_category_minutes",
    metadata,
    required("minute", TS),
    required("agent_id", Text),
    required("domain", Text),
    required("tier", SmallInteger),
    required("category", Text),
    required("verdicts", BigInteger),
    PrimaryKeyConstraint(
        "minute", *_VERDICT_SEGMENT, "category", name="pk_verdict_category_minutes"
    ),
)

# Judge flags against conversation outcomes, kept by triggers on ``verdicts`` and on
# ``conversations`` (migration 0040, which says what each holds and in what order they lock):
# the rows of ``verdict_pairs`` with a label and an outcome, and the per-minute counts of those
# that are their conversation's only one for their judge version.
verdict_truth = Table(
    "verdict_truth",
    metadata,
    required("conversation_id", Text),
    required("judge", Text),
    required("judge_version", Text),
    required("minute", TS),
    required("agent_id", Text),
    required("domain", Text),
    required("tier", SmallInteger),
    required("flagged", Boolean),
    required("failed", Boolean),
    required("first_minute", TS),
    required("last_minute", TS),
    required("flagged_any", Boolean),
    required("uniform", Boolean),
    PrimaryKeyConstraint(
        "conversation_id", "judge", "judge_version", "minute", name="pk_verdict_truth"
    ),
    # the judges panels group, of a range, the rows of pairs not uniform and of pairs spanning
    # the range's start or end
    Index("ix_verdict_truth_mixed", "minute", postgresql_where=text("NOT uniform")),
    Index(
        "ix_verdict_truth_span",
        text("tstzrange(first_minute, last_minute, '[]')"),
        postgresql_using="gist",
    ),
)

verdict_truth_minutes = Table(
    "verdict_truth_minutes",
    metadata,
    required("minute", TS),
    required("last_minute", TS),
    required("agent_id", Text),
    required("domain", Text),
    required("tier", SmallInteger),
    required("judge", Text),
    required("judge_version", Text),
    required("flagged", Boolean),
    required("failed", Boolean),
    required("pairs", BigInteger),
    PrimaryKeyConstraint(
        "minute",
        "last_minute",
        *_VERDICT_SEGMENT,
        "judge",
        "judge_version",
        "flagged",
        "failed",
        name="pk_verdict_truth_minutes",
    ),
)
