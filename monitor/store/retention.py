"""The retention job: partitions created ahead, old data removed.

:func:`run_retention` at ``now``, with the horizons of
:func:`monitor.core.retention_settings.horizons`:

1. creates today's and the next ``partitions_ahead_days`` daily partitions of ``events``;
2. drops every ``events`` partition of a day before the events horizon into which nothing was
   written since the horizon (whole tables: no DELETE, no vacuum debt). Retention is by event
   time, but an old day that was replayed (written) recently is kept until it has been idle as
   long as the retention, so ``monitor replay`` of an old file is not dropped an hour later.
   A DROP needs ACCESS EXCLUSIVE on ``events``; it waits at most
   :data:`LOCK_TIMEOUT` (readers and writers queue behind a waiting DROP), and when it times out
   the step is reported as failed and retried at the next run;
3. empties (TRUNCATE, a new empty file) the unsampled leaf of every day into which nothing was
   ingested since the unsampled horizon (``retention_unsampled_hours`` before ``now``): the
   events of conversations outside the sample, which no reader needs after the always-sample
   rules had that long to promote them (migration 0027), and deletes their keys from
   ``event_ids`` in the same transaction (migration 0031: an event delivered again after its
   leaf was emptied is stored again, so the window must cover how far back the topics can be
   re-delivered);
4. deletes the rows before their horizon of ``event_ids`` (by ``ts``, and only once the
   event's partition is gone: a kept day stays de-duplicated), the 1-minute sums
   (``calibration_bins`` at ``1m`` by ``window_start``, ``event_minutes`` and
   ``ingest_delay_bins`` by ``minute``, which is the minute of ``ingested_at``,
   ``conversation_minutes`` by its minute of ``first_ts``), the hourly and
   daily sums (``calibration_bins`` and ``escalation_bins`` at ``1h`` / ``1d``), ``items`` (by
   ``ts``) with ``item_hours``, ``design_hours`` and ``label_hours`` (by ``hour``),
   ``conversations`` (by ``last_ts``, the conversation's last event, once nothing was written
   into the row since the horizon either: replayed old traffic is kept), ``dead_letters`` (by
   ``received_at``), ``verdicts`` and ``judge_requests`` (by ``created_at`` /
   ``requested_at``). The conversation row and verdicts of an alert's exemplar
   (``alert_exemplars``) are kept; the exemplars themselves, like the alert history, are never
   deleted (their events: promoted into the kept sample when chosen, they go with their day's
   partition at the events horizon).

Every step is its own transaction and idempotent (running it twice removes nothing more), so a
step that fails leaves the others done. One worker runs it at a time: the run holds the
session advisory lock :data:`RETENTION_LOCK` and a worker that cannot take it skips its run
(``ran`` is False). What is kept is exact: a time window that lies after every horizon of the
data it reads gives the same answer before and after a run (the retention test shows it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import partial

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from monitor.core.retention_settings import Horizons, RetentionSettings, horizons, midnight
from monitor.store import partitions

log = logging.getLogger("monitor.retention")

RETENTION_LOCK = 0x6D6F6E_0A1E_0013
"""Session-level advisory lock key held by the worker running retention."""
LOCK_TIMEOUT = "2s"


def _by_resolution(table: str, resolution: str, horizon: str) -> tuple[str, str, str]:
    """The entry of :data:`_DELETES` for one ``resolution`` of a roll-up kept per
    ``resolution`` and ``window_start``; named ``<table>_<resolution>``."""
    sql = f"DELETE FROM {table} WHERE resolution = '{resolution}' AND window_start < :cut"
    return f"{table}_{resolution}", horizon, sql


# an exemplar's conversation row and verdicts stay as long as its alert_exemplars row, which,
# like the alert history, retention never deletes
_NOT_EXEMPLAR = (
    "NOT EXISTS (SELECT 1 FROM alert_exemplars x WHERE x.conversation_id = {t}.conversation_id)"
)

# these DELETEs hold the rows they delete when the triggers of migration 0040 refresh the judge
# flags against outcomes, so they refresh as bulk writers (one table lock, waited for after the
# refreshes in progress; none per conversation, which would wait for an ingest writer that waits
# for one of those rows)
_BULK_TABLES = ("DELETE FROM conversations ", "DELETE FROM verdicts ")
VERDICT_TRUTH_BULK = "monitor.verdict_truth_bulk"

# (name in reports and metrics, horizon attribute, DELETE statement with :cut)
_DELETES: tuple[tuple[str, str, str], ...] = (
    # an id is forgotten only once its events partition is gone (a kept replayed day stays
    # de-duplicated)
    (
        "event_ids",
        "event_ids",
        "DELETE FROM event_ids WHERE ts < :cut AND to_regclass('event_partitions.events_'"
        " || to_char(ts AT TIME ZONE 'UTC', 'YYYYMMDD')) IS NULL",
    ),
    _by_resolution("calibration_bins", "1m", "minute_sums"),
    ("event_minutes", "minute_sums", "DELETE FROM event_minutes WHERE minute < :cut"),
    ("ingest_delay_bins", "minute_sums", "DELETE FROM ingest_delay_bins WHERE minute < :cut"),
    ("conversation_minutes", "minute_sums", "DELETE FROM conversation_minutes WHERE minute < :cut"),
    _by_resolution("calibration_bins", "1h", "hourly_sums"),
    _by_resolution("calibration_bins", "1d", "daily_sums"),
    ("items", "items", "DELETE FROM items WHERE ts < :cut"),
    # the cut is midnight, so whole hours go with their items
    ("item_hours", "items", "DELETE FROM item_hours WHERE hour < :cut"),
    ("design_hours", "items", "DELETE FROM design_hours WHERE hour < :cut"),
    ("label_hours", "items", "DELETE FROM label_hours WHERE hour < :cut"),
    _by_resolution("escalation_bins", "1h", "hourly_sums"),
    _by_resolution("escalation_bins", "1d", "daily_sums"),
    # by event time, but a conversation written into since the horizon (a replay of old
    # traffic, an agent resuming it) is kept until idle as long
    (
        "conversations",
        "conversations",
        "DELETE FROM conversations WHERE last_ts < :cut AND updated_at < :cut"
        f" AND {_NOT_EXEMPLAR.format(t='conversations')}",
    ),
    ("dead_letters", "dead_letters", "DELETE FROM dead_letters WHERE received_at < :cut"),
    (
        "verdicts",
        "verdicts",
        f"DELETE FROM verdicts WHERE created_at < :cut AND {_NOT_EXEMPLAR.format(t='verdicts')}",
    ),
    ("judge_requests", "verdicts", "DELETE FROM judge_requests WHERE requested_at < :cut"),
)


@dataclass
class RetentionReport:
    """What one run did. ``deleted``: rows removed per kind; ``failed``: steps that raised."""

    ran: bool = True
    horizons: Horizons | None = None
    partitions_created: int = 0
    partitions_dropped: int = 0
    unsampled_emptied: int = 0
    deleted: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)


async def run_retention(
    engine: AsyncEngine, settings: RetentionSettings, now: datetime
) -> RetentionReport:
    """One retention run at ``now`` (module docstring); logs and returns what it did."""
    report = RetentionReport(horizons=horizons(settings, now))
    async with engine.connect() as conn:
        got: bool = (
            await conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": RETENTION_LOCK})
        ).scalar_one()
        await conn.commit()
        if not got:
            log.info("retention: another worker is running it; skipped")
            return RetentionReport(ran=False)
        try:
            await _steps(conn, settings, now, report)
        finally:
            await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": RETENTION_LOCK})
            await conn.commit()
    log.info(
        "retention: %d partitions created, %d dropped, %d unsampled emptied, rows deleted %s%s",
        report.partitions_created,
        report.partitions_dropped,
        report.unsampled_emptied,
        report.deleted,
        f", failed: {report.failed}" if report.failed else "",
    )
    return report


async def _steps(
    conn: AsyncConnection, settings: RetentionSettings, now: datetime, report: RetentionReport
) -> None:
    h = report.horizons
    assert h is not None
    days = partitions.ahead(now.astimezone(UTC).date(), settings.partitions_ahead_days)
    # when this fails, the writer still creates the partitions it needs
    created = await _step(conn, report, "partitions_ahead", partial(partitions.ensure, conn, days))
    report.partitions_created = created or 0
    if h.events is not None:
        dropping = partial(drop_before, conn, h.events)
        dropped = await _step(conn, report, "events_partitions", dropping, lock_timeout=True)
        report.partitions_dropped = dropped or 0
    if h.unsampled is not None:
        emptying = partial(empty_unsampled, conn, h.unsampled)
        emptied = await _step(conn, report, "unsampled_events", emptying, lock_timeout=True)
        report.unsampled_emptied = emptied or 0
    for name, attr, sql in _DELETES:
        cut: date | None = getattr(h, attr)
        if cut is None:
            continue
        deleted = await _step(conn, report, name, partial(_delete, conn, sql, midnight(cut)))
        if deleted is not None:
            report.deleted[name] = deleted


async def _step(
    conn: AsyncConnection,
    report: RetentionReport,
    name: str,
    work: Callable[[], Awaitable[int]],
    *,
    lock_timeout: bool = False,
) -> int | None:
    """Run ``work`` as one transaction (each lock waited for at most :data:`LOCK_TIMEOUT` when
    ``lock_timeout``); its count, or None when it raised: rolled back and recorded as the failed
    step ``name``, so the other steps still run."""
    try:
        if lock_timeout:
            await conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        count = await work()
        await conn.commit()
    except Exception as exc:
        await conn.rollback()
        _failed(report, name, exc)
        return None
    return count


async def _delete(conn: AsyncConnection, sql: str, cut: datetime) -> int:
    if sql.startswith(_BULK_TABLES):
        await conn.execute(text(f"SET LOCAL {VERDICT_TRUTH_BULK} = on"))
    result = await conn.execute(text(sql), {"cut": cut})
    return int(getattr(result, "rowcount", 0) or 0)


async def drop_before(conn: AsyncConnection, day: date) -> int:
    """Drop every ``events`` partition of a day before ``day`` not written into since ``day``
    began; returns how many."""
    result = await conn.execute(text("SELECT drop_event_partitions(:d)"), {"d": day})
    return int(result.scalar_one())


async def empty_unsampled(conn: AsyncConnection, idle_since: datetime) -> int:
    """Empty every day's unsampled ``events`` leaf with no row ingested at or after
    ``idle_since`` (and not empty already); returns how many."""
    result = await conn.execute(text("SELECT truncate_unsampled_events(:t)"), {"t": idle_since})
    return int(result.scalar_one())


def _failed(report: RetentionReport, step: str, exc: Exception) -> None:
    log.warning(
        "retention: %s failed (%s: %s); retried at the next run", step, type(exc).__name__, exc
    )
    report.failed.append(step)
