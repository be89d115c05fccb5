"""When a conversation is judged, and when it is judged again (pure: plain values in and out).

**Idle.** A conversation is idle when both hold:

- *event time*: its latest event's timestamp (``conversations.last_ts``) is more than
  ``idle_s`` before the scheduler's clock;
- *arrival time*: the newest write that stored one of its events (``conversations.updated_at``,
  the store's ``now()`` of that write) is more than ``arrival_idle_s`` before the store's
  clock.

Event time alone called a conversation idle while it was still arriving whenever its events
arrived already old (a replay, a backfill, a client that buffers, an SDK flushing after an
outage); each clock is compared with the times it stamped.

**Judged, then judged again.** An idle conversation in the sample is judged once it was never
requested. The verdicts record how many of its events they cover (the conversation's stored
event count in the snapshot the judges read). A judged conversation that has stored more events
since is judged again once it is idle again, when its last judgement is more than
``rejudge_gap_s`` old (store's clock) and it was judged again fewer than ``rejudge_most`` times;
the new verdicts replace every stored verdict of the conversation (:func:`replaces`).

The scheduler's SQL (:mod:`monitor.judges.repo`) selects exactly the conversations
:func:`due` calls :attr:`Due.JUDGE` or :attr:`Due.REJUDGE` (the sampling rules aside);
``conversations.judge_watch`` (:func:`watch`) is what lets it find the re-judge candidates
through a small partial index.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class JudgeTiming:
    """The scheduler's rules (settings ``judge_idle_s``, ``judge_arrival_idle_s``,
    ``judge_rejudge_most``, ``judge_rejudge_gap_s``); seconds."""

    idle_s: float = 30.0
    arrival_idle_s: float = 30.0
    rejudge_most: int = 5
    rejudge_gap_s: float = 60.0

    def __post_init__(self) -> None:
        if min(self.idle_s, self.arrival_idle_s, self.rejudge_gap_s) < 0 or self.rejudge_most < 0:
            raise ValueError(f"judge timing values must not be negative: {self}")


@dataclass(frozen=True, slots=True)
class JudgingState:
    """One conversation as the scheduler sees it.

    ``last_arrival``: when the newest write that stored one of its events ran (store's clock).
    ``requested``: sent to the judges at least once; ``pending``: a request whose verdicts are
    not stored yet. ``judged_events``: the stored events its verdicts cover (None: never
    judged); ``judged_at``: when they were stored (store's clock); ``rejudges``: how many times
    it was sent to the judges again.
    """

    last_ts: datetime
    last_arrival: datetime
    event_count: int
    requested: bool = False
    pending: bool = False
    judged_events: int | None = None
    judged_at: datetime | None = None
    rejudges: int = 0


class Due(StrEnum):
    """What the scheduler does with a conversation now."""

    JUDGE = "judge"  # idle, never requested: judge it
    REJUDGE = "rejudge"  # idle, grew since its verdicts: judge it again
    ARRIVING = "arriving"  # not idle (by event time or by arrival)
    PENDING = "pending"  # a request of it waits for its verdicts
    CURRENT = "current"  # its verdicts cover every stored event
    GAP = "gap"  # grew, but judged less than rejudge_gap_s ago: later
    SPENT = "spent"  # grew, but judged again rejudge_most times already: never again


def is_idle(
    last_ts: datetime,
    last_arrival: datetime,
    now: datetime,
    store_now: datetime,
    timing: JudgeTiming,
) -> bool:
    """Idle by event time (``now``, the scheduler's clock) and by arrival (``store_now``)."""
    return last_ts < now - _s(timing.idle_s) and last_arrival < store_now - _s(
        timing.arrival_idle_s
    )


def due(state: JudgingState, now: datetime, store_now: datetime, timing: JudgeTiming) -> Due:
    """What :class:`Due` ``state`` is at ``now`` (scheduler's clock) and ``store_now``."""
    if state.pending or (state.requested and state.judged_events is None):
        return Due.PENDING
    if not is_idle(state.last_ts, state.last_arrival, now, store_now, timing):
        return Due.ARRIVING
    if not state.requested:
        return Due.JUDGE
    assert state.judged_events is not None  # requested, not pending: judged
    if state.event_count <= state.judged_events:
        return Due.CURRENT
    if state.rejudges >= timing.rejudge_most:
        return Due.SPENT
    if state.judged_at is None or state.judged_at >= store_now - _s(timing.rejudge_gap_s):
        return Due.GAP
    return Due.REJUDGE


def watch(judged_events: int, rejudges: int, timing: JudgeTiming) -> int | None:
    """``conversations.judge_watch`` once a judgement covering ``judged_events`` is stored:
    the conversation is a re-judge candidate as soon as it stores more events than this;
    None when its re-judgements are spent (never a candidate again)."""
    return judged_events if rejudges < timing.rejudge_most else None


def replaces(stored_events: int, judged_events: int | None) -> bool:
    """Whether a judge request judges the conversation afresh (True: it stored events since
    its verdicts, which the new ones replace, every judge running) or completes it (False: a
    first judgement, or a request delivered again: only the judges without a verdict run)."""
    return judged_events is not None and stored_events != judged_events


def _s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)
