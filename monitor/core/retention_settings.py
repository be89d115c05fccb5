"""How long the store keeps what: the retention settings and their horizons.

:class:`RetentionSettings` declares the ``MONITOR_RETENTION_*`` / partition settings; it is a
base of :class:`monitor.config.Settings` (which alone reads them from the environment), kept
here so that the settings module stays short. Every ``*_days`` value counts whole UTC days;
``0`` means keep forever.

:func:`horizons` turns the settings into the cut-off of each kind of data at a moment ``now``:
rows (or daily ``events`` partitions) strictly before the cut-off are removed by the retention
job (:mod:`monitor.store.retention`). The unsampled events' horizon is an instant (``now`` minus
``retention_unsampled_hours``); every other cut-off is midnight UTC, ``days`` days before
the start of ``now``'s day, so the retained range is ``days`` whole days plus today, and
re-running the job within the same day removes nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from pydantic import BaseModel, Field

from monitor.core.fields import non_negative, positive


class RetentionSettings(BaseModel):
    """Retention and partition settings (a base of ``Settings``; validated with it)."""

    retention_events_days: int = non_negative(
        30,
        "Days of raw events kept: older daily partitions of events are dropped "
        "whole (by event time, ts; a day written into within the horizon, a replay, is kept "
        "until idle as long). 0: keep forever.",
    )
    retention_unsampled_hours: int = non_negative(
        48,
        "Hours the events of conversations outside the sample (not sampled by "
        "rate, no always-sample rule fired) are kept: a day's unsampled leaf of events is "
        "emptied whole (TRUNCATE) once nothing was written into it for this long, so every such "
        "event stays at least this long after it was ingested, for a rule firing later to "
        "promote its conversation whole. Their de-duplication keys go with them: a copy "
        "delivered again later is stored again, so keep this at least as long as the topics "
        "can be re-delivered (their retention.ms). 0: kept as long as the other events.",
    )
    retention_event_ids_days: int = non_negative(
        60,
        "Days an event_id is remembered for de-duplication (by event time); never "
        "less than retention_events_days. A replay of an event older than this is stored again.",
    )
    retention_minute_sums_days: int = non_negative(
        30,
        "Days of 1-minute sums kept (calibration_bins at 1m, event_minutes, "
        "ingest_delay_bins, conversation_minutes). 0: keep forever.",
    )
    retention_hourly_sums_days: int = non_negative(
        90, "Days of hourly sums kept (calibration_bins and escalation_bins at 1h)."
    )
    retention_daily_sums_days: int = non_negative(
        400, "Days of daily sums kept (calibration_bins and escalation_bins at 1d)."
    )
    retention_items_days: int = non_negative(
        90,
        "Days of items (scored assistant messages) kept, by ts, with their hourly roll-ups "
        "(item_hours, design_hours, label_hours).",
    )
    retention_conversations_days: int = non_negative(
        90,
        "Days a conversation's roll-up row is kept after its last event and its "
        "last write (a replay of old traffic is kept; never fewer than retention_events_days). "
        "An event arriving for a conversation already removed starts a new row, counted again "
        "in the escalation sums. 0: keep forever.",
    )
    retention_dead_letters_days: int = non_negative(
        30, "Days dead letters are kept, by received_at. 0: forever."
    )
    retention_verdicts_days: int = non_negative(
        90,
        "Days judge verdicts (by created_at) and judge requests (by requested_at) "
        "are kept. 0: keep forever.",
    )
    retention_interval_s: float = positive(
        3600.0,
        "Seconds between the worker's retention runs (also run at start; one worker at a time): "
        "partitions created ahead, old ones dropped, old sums and items deleted.",
    )
    partitions_ahead_days: int = Field(
        default=3, ge=1, description="Daily partitions of events created ahead of today."
    )


@dataclass(frozen=True)
class Horizons:
    """Cut-offs (midnight UTC; ``None`` = keep forever) of each kind of stored data."""

    events: date | None
    event_ids: date | None
    minute_sums: date | None
    hourly_sums: date | None
    daily_sums: date | None
    items: date | None
    conversations: date | None = None
    dead_letters: date | None = None
    verdicts: date | None = None
    #: unsampled events: a day's leaf with nothing ingested since this instant is emptied
    unsampled: datetime | None = None


def cutoff(now: datetime, days: int) -> date | None:
    """The first day kept when keeping ``days`` whole days before ``now``'s UTC day (None: 0)."""
    if days == 0:
        return None
    return now.astimezone(UTC).date() - timedelta(days=days)


def midnight(day: date) -> datetime:
    """``day``'s start as an aware UTC datetime."""
    return datetime.combine(day, time(0), tzinfo=UTC)


def event_ids_days(settings: RetentionSettings) -> int:
    """Days the event ids are kept: ``retention_event_ids_days`` but never fewer than the
    events (0, forever, when either is 0), so that a stored event is always de-duplicated."""
    ids, ev = settings.retention_event_ids_days, settings.retention_events_days
    return 0 if ids == 0 or ev == 0 else max(ids, ev)


def conversations_days(settings: RetentionSettings) -> int:
    """Days conversation rows are kept: ``retention_conversations_days`` but never fewer than
    the events (0, forever, when either is 0): a conversation with a stored event keeps its row."""
    conv, ev = settings.retention_conversations_days, settings.retention_events_days
    return 0 if conv == 0 or ev == 0 else max(conv, ev)


def horizons(settings: RetentionSettings, now: datetime) -> Horizons:
    """The cut-off of each kind of data at ``now`` (see the module docstring)."""
    s = settings
    return Horizons(
        events=cutoff(now, s.retention_events_days),
        event_ids=cutoff(now, event_ids_days(s)),
        minute_sums=cutoff(now, s.retention_minute_sums_days),
        hourly_sums=cutoff(now, s.retention_hourly_sums_days),
        daily_sums=cutoff(now, s.retention_daily_sums_days),
        items=cutoff(now, s.retention_items_days),
        conversations=cutoff(now, conversations_days(s)),
        dead_letters=cutoff(now, s.retention_dead_letters_days),
        verdicts=cutoff(now, s.retention_verdicts_days),
        unsampled=(
            now - timedelta(hours=s.retention_unsampled_hours)
            if s.retention_unsampled_hours
            else None
        ),
    )
