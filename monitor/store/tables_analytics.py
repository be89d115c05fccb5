"""Tables of the analytics, on the same metadata as :mod:`monitor.store.tables`.

``items``
    One row per assistant message with a confidence (docs/design.md: an *item*), with the
    sampling weight of its conversation (fixed when the item is written) and its current best
    label (``NULL`` until one exists). Segment columns use sentinels instead of NULL so that they
    can be part of keys: ``''`` for a missing agent version or domain, ``0`` for a missing tier.
``calibration_bins``
    Additive sums per (resolution, window start, segment, confidence bin): exactly the fields of
    :class:`monitor.analytics.bins.BinSums` (``count, weight, sum_conf, sum_y, sum_sq_err,
    sum_w2``). Resolutions ``1m``, ``1h``, ``1d``; windows start on UTC boundaries. Any time range
    aligned to a resolution, and any roll-up of segments, is the sum of its rows.
``item_hours``
    Labelled items with weight > 0 per (conversation, hour of ``ts``, segment): ``n``, kept with
    the items' labels (a row whose items lost their label keeps ``n = 0``). ``multi`` is true on
    every row of a conversation that has more than one row; a conversation with one row has
    ``multi`` false. With ``design_hours`` it gives the design effect of any range of whole hours
    without reading ``items`` (:mod:`monitor.analytics.design_effect`).
``design_hours``
    Per (hour, segment): ``items`` = the sum of ``item_hours.n``, ``conversations`` = the number
    of its ``item_hours`` rows with ``n > 0``.
``label_hours``
    Labelled items (any weight) per (hour of ``ts``, segment, ``label_source``): how much of a
    window's labels come from outcomes and how much from judges, without reading ``items``.
``calibration_maps``
    Versioned isotonic recalibration maps per (agent, domain) with their held-out evaluation.
``drift_checks``
    One row per drift check of a segment (recent window against a baseline window): every
    statistic and p-value, the sample sizes, which tests fired and why. Re-running a check for
    the same windows replaces its row.
``drift_references``
    The drift state of each segment (:class:`monitor.analytics.drift_policy.Reference`): the
    pinned reference window the periodic checks compare with, the start of the current clean
    stretch (NULL while a change is flagged), when the flagged episode started, and the last
    check's recent window end. One row per segment, replaced after every periodic check.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from monitor.store.tables import TS, metadata

#: Resolutions kept in ``calibration_bins``, with their ``date_trunc`` unit.
RESOLUTIONS = {"1m": "minute", "1h": "hour", "1d": "day"}

#: Segment key of the analytics tables, in key order.
SEGMENT_KEY = ("agent_id", "agent_version", "domain", "tier")


def _segment() -> list[Column[object]]:
    return [
        Column("agent_id", Text, nullable=False),
        Column("agent_version", Text, nullable=False, server_default=""),
        Column("domain", Text, nullable=False, server_default=""),
        Column("tier", SmallInteger, nullable=False, server_default="0"),
    ]


items = Table(
    "items",
    metadata,
    Column("event_id", Text, primary_key=True),
    Column("conversation_id", Text, nullable=False),
    Column("ts", TS, nullable=False),
    *_segment(),
    Column("confidence", Double, nullable=False),
    Column("weight", Double, nullable=False),
    Column("label", SmallInteger),
    Column("label_source", Text),
    Column("labelled_at", TS),
    Index(None, "conversation_id"),
    Index(None, "agent_id", "ts"),
    # windows over every agent (design effects) and retention (migration 0018)
    Index(None, "ts"),
)

item_hours = Table(
    "item_hours",
    metadata,
    Column("conversation_id", Text, nullable=False),
    Column("hour", TS, nullable=False),
    *_segment(),
    Column("n", BigInteger, nullable=False),
    Column("multi", Boolean, nullable=False),
    PrimaryKeyConstraint("conversation_id", "hour", *SEGMENT_KEY, name="pk_item_hours"),
    Index("ix_item_hours_multi", "hour", postgresql_where=text("multi")),
)

design_hours = Table(
    "design_hours",
    metadata,
    Column("hour", TS, nullable=False),
    *_segment(),
    Column("items", BigInteger, nullable=False),
    Column("conversations", BigInteger, nullable=False),
    PrimaryKeyConstraint("hour", *SEGMENT_KEY, name="pk_design_hours"),
)

label_hours = Table(
    "label_hours",
    metadata,
    Column("hour", TS, nullable=False),
    *_segment(),
    Column("label_source", Text, nullable=False),
    Column("items", BigInteger, nullable=False),
    PrimaryKeyConstraint("hour", *SEGMENT_KEY, "label_source", name="pk_label_hours"),
)

calibration_bins = Table(
    "calibration_bins",
    metadata,
    Column("resolution", Text, primary_key=True),
    Column("window_start", TS, primary_key=True),
    Column("agent_id", Text, primary_key=True),
    Column("agent_version", Text, primary_key=True),
    Column("domain", Text, primary_key=True),
    Column("tier", SmallInteger, primary_key=True),
    Column("bin", SmallInteger, primary_key=True),
    Column("count", BigInteger, nullable=False),
    Column("weight", Double, nullable=False),
    Column("sum_conf", Double, nullable=False),
    Column("sum_y", Double, nullable=False),
    Column("sum_sq_err", Double, nullable=False),
    Column("sum_w2", Double, nullable=False),
    Index(None, "resolution", "agent_id", "window_start"),
)

calibration_maps = Table(
    "calibration_maps",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("agent_id", Text, nullable=False),
    Column("domain", Text, nullable=False, server_default=""),
    Column("version", Integer, nullable=False),
    Column("method", Text, nullable=False),
    Column("map", JSONB, nullable=False),
    Column("n_train", Integer, nullable=False),
    Column("n_holdout", Integer, nullable=False),
    Column("ece_before", Double),
    Column("ece_after", Double),
    Column("brier_before", Double),
    Column("brier_after", Double),
    Column("data_from", TS),
    Column("data_to", TS),
    Column("fitted_at", TS, nullable=False, server_default=func.now()),
    UniqueConstraint("agent_id", "domain", "version"),
)

drift_checks = Table(
    "drift_checks",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("checked_at", TS, nullable=False, server_default=func.now()),
    *_segment(),
    Column("baseline_from", TS, nullable=False),
    Column("baseline_to", TS, nullable=False),
    Column("recent_from", TS, nullable=False),
    Column("recent_to", TS, nullable=False),
    Column("n_baseline", Integer, nullable=False),
    Column("n_recent", Integer, nullable=False),
    Column("psi", Double),
    Column("ks_statistic", Double),
    Column("ks_pvalue", Double),
    Column("accuracy_baseline", Double),
    Column("accuracy_recent", Double),
    Column("accuracy_pvalue", Double),
    Column("ece_baseline", Double),
    Column("ece_recent", Double),
    Column("ece_delta", Double),
    Column("ece_pvalue", Double),
    Column("fired", Boolean, nullable=False),
    Column("fired_tests", Text, nullable=False, server_default=""),
    Column("reason", Text, nullable=False),
    Column("details", JSONB, nullable=False),
    UniqueConstraint(
        *SEGMENT_KEY,
        "recent_from",
        "recent_to",
        "baseline_from",
        "baseline_to",
        name="uq_drift_checks_segment_windows",
    ),
    Index(None, "recent_to"),
)

drift_references = Table(
    "drift_references",
    metadata,
    *_segment(),
    Column("ref_from", TS, nullable=False),
    Column("ref_to", TS, nullable=False),
    Column("clean_since", TS),
    Column("flagged_since", TS),
    Column("last_recent_to", TS, nullable=False),
    Column("updated_at", TS, nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*SEGMENT_KEY, name="pk_drift_references"),
)
