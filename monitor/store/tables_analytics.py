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
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from monitor.store.tables import TS, inserted_at, key, metadata, required, serial_id

#: Resolutions kept in ``calibration_bins``, with their ``date_trunc`` unit.
RESOLUTIONS = {"1m": "minute", "1h": "hour", "1d": "day"}

#: Segment key of the analytics tables, in key order.
SEGMENT_KEY = ("agent_id", "agent_version", "domain", "tier")


def _segment() -> list[Column[object]]:
    return [
        required("agent_id", Text),
        required("agent_version", Text, server_default=""),
        required("domain", Text, server_default=""),
        required("tier", SmallInteger, server_default="0"),
    ]


items = Table(
    "items",
    metadata,
    key("event_id", Text),
    required("conversation_id", Text),
    required("ts", TS),
    *_segment(),
    required("confidence", Double),
    required("weight", Double),
    Column("label", SmallInteger),
    Column("label_source", Text),
    Column("labelled_at", TS),
    Index(None, "conversation_id"),
    Index(None, "agent_id", "ts"),
    # windows over every agent (design effects) and retention (migration 0018)
    Index(None, "ts"),
    # the calibration Examples: wrong answers of the weighted sample, most confident first
    Index(
        "ix_items_wrong_confidence",
        "confidence",
        "ts",
        postgresql_where=text("label = 0 AND weight > 0"),
    ),
)

item_hours = Table(
    "item_hours",
    metadata,
    required("conversation_id", Text),
    required("hour", TS),
    *_segment(),
    required("n", BigInteger),
    required("multi", Boolean),
    PrimaryKeyConstraint("conversation_id", "hour", *SEGMENT_KEY, name="pk_item_hours"),
    Index("ix_item_hours_multi", "hour", postgresql_where=text("multi")),
)

design_hours = Table(
    "design_hours",
    metadata,
    required("hour", TS),
    *_segment(),
    required("items", BigInteger),
    required("conversations", BigInteger),
    PrimaryKeyConstraint("hour", *SEGMENT_KEY, name="pk_design_hours"),
)

label_hours = Table(
    "label_hours",
    metadata,
    required("hour", TS),
    *_segment(),
    required("label_source", Text),
    required("items", BigInteger),
    PrimaryKeyConstraint("hour", *SEGMENT_KEY, "label_source", name="pk_label_hours"),
)

calibration_bins = Table(
    "calibration_bins",
    metadata,
    key("resolution", Text),
    key("window_start", TS),
    key("agent_id", Text),
    key("agent_version", Text),
    key("domain", Text),
    key("tier", SmallInteger),
    key("bin", SmallInteger),
    required("count", BigInteger),
    required("weight", Double),
    required("sum_conf", Double),
    required("sum_y", Double),
    required("sum_sq_err", Double),
    required("sum_w2", Double),
    Index(None, "resolution", "agent_id", "window_start"),
)

calibration_maps = Table(
    "calibration_maps",
    metadata,
    serial_id(),
    required("agent_id", Text),
    required("domain", Text, server_default=""),
    required("version", Integer),
    required("method", Text),
    required("map", JSONB),
    required("n_train", Integer),
    required("n_holdout", Integer),
    Column("ece_before", Double),
    Column("ece_after", Double),
    Column("brier_before", Double),
    Column("brier_after", Double),
    Column("data_from", TS),
    Column("data_to", TS),
    inserted_at("fitted_at"),
    UniqueConstraint("agent_id", "domain", "version"),
)

drift_checks = Table(
    "drift_checks",
    metadata,
    serial_id(),
    inserted_at("checked_at"),
    *_segment(),
    required("baseline_from", TS),
    required("baseline_to", TS),
    required("recent_from", TS),
    required("recent_to", TS),
    required("n_baseline", Integer),
    required("n_recent", Integer),
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
    required("fired", Boolean),
    required("fired_tests", Text, server_default=""),
    required("reason", Text),
    required("details", JSONB),
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
    required("ref_from", TS),
    required("ref_to", TS),
    Column("clean_since", TS),
    Column("flagged_since", TS),
    required("last_recent_to", TS),
    inserted_at("updated_at"),
    PrimaryKeyConstraint(*SEGMENT_KEY, name="pk_drift_references"),
)
