"""Tables of the judging pipeline, on the shared metadata.

``verdicts``
    One row per (conversation, item, judge, judge version): what the judge said about one
    assistant message (``item_id`` = its event id) or about the whole conversation
    (``item_id = ''``). Unique on that key, so a judge re-run after a restart or a re-delivered
    judge request never stores a second verdict. Error verdicts are stored too (``status =
    'error'`` with ``error`` the reason) and count as judged.
``judge_quality``
    One row per (judge, judge version, scope): its precision (with the ends of its 95 % Wilson
    interval) and recall against conversation outcomes as last measured by the worker, in the
    scope ``agent_id`` x ``domain`` (``domain`` '' when the conversations have none;
    ``agent_id`` '' is the judge's pooled row over every scope), and ``labels``: whether its
    verdicts label the items of that scope (:mod:`monitor.judges.quality`: the lower end of
    the deciding interval clears ``floor``; ``decided_by`` 'scope' or 'pooled'). A scope
    without a row goes by the pooled row; a judge without a row labels nothing
    (:data:`monitor.ingest.items_sql.SYNC_ITEMS`). Verdicts of a judge that does not label
    stay stored and shown.
``judge_requests``
    One row per conversation sent to the judges: when (last) and why (the sampling reasons), so
    the scheduler never sends a conversation twice for the same events and the dashboards can
    show the judged sample; ``resends``/``resent_at`` count the times a request without
    verdicts was sent again; ``judged_events`` is how many stored events the conversation's
    verdicts cover (the count in the snapshot the judges read) and ``rejudges`` how many times
    it was sent again because it grew after it was judged (:mod:`monitor.judges.rejudge`).
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from monitor.store.tables import TS, inserted_at, key, metadata, required, serial_id

verdicts = Table(
    "verdicts",
    metadata,
    serial_id(),
    required("conversation_id", Text),
    required("item_id", Text, server_default=""),
    required("agent_id", Text),
    required("judge", Text),
    required("judge_version", Text),
    required("status", Text),
    Column("label", SmallInteger),
    Column("score", Double),
    required("categories", JSONB, server_default="[]"),
    required("evidence", JSONB, server_default="{}"),
    Column("rationale", Text),
    Column("error", Text),
    required("latency_ms", Double, server_default="0"),
    inserted_at("created_at"),
    UniqueConstraint(
        "conversation_id", "item_id", "judge", "judge_version", name="uq_verdicts_item_judge"
    ),
    # the judges dashboard reads a range of verdicts from this index alone (migration 0038)
    Index(
        "ix_verdicts_created_at_rows",
        "created_at",
        postgresql_include=[
            "agent_id",
            "judge",
            "judge_version",
            "status",
            "label",
            "latency_ms",
            "conversation_id",
        ],
    ),
    Index(None, "agent_id", "created_at"),
)

judge_requests = Table(
    "judge_requests",
    metadata,
    key("conversation_id", Text),
    required("agent_id", Text),
    required("reasons", JSONB),
    inserted_at("requested_at"),
    Column("judged_at", TS),
    required("resends", Integer, server_default="0"),
    Column("resent_at", TS),
    Column("judged_events", Integer),
    required("rejudges", Integer, server_default="0"),
    Index(None, "requested_at"),
    Index(
        "ix_judge_requests_pending",
        "requested_at",
        postgresql_where=text("judged_at IS NULL"),
    ),
)

judge_quality = Table(
    "judge_quality",
    metadata,
    key("judge", Text),
    key("judge_version", Text),
    key("agent_id", Text),
    key("domain", Text),
    required("pairs", Integer),
    required("flagged", Integer),
    Column("precision", Double),
    Column("recall", Double),
    required("floor", Double),
    required("min_pairs", Integer),
    inserted_at("computed_at"),
    Column("precision_low", Double),
    Column("precision_high", Double),
    required("decided_by", Text),
    required("labels", Boolean, server_default="false"),
)
