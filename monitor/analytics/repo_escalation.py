"""The escalation reads: conversations as :class:`ConversationEscalation` inputs.

:func:`escalation_conversations` sums ``escalation_bins`` (:mod:`monitor.store.tables_rollups`)
for the whole days and whole hours of ``[start, end)`` and reads ``conversations`` row by row
only for the partial hours at the two ends (an index on ``first_ts`` serves them), so its cost
grows with the number of distinct keys, not with the number of conversations. The result is
the same multiset of conversations the per-row query (:func:`escalation_conversations_per_row`)
returns, with the exactness of :mod:`monitor.ingest.escalation_sql`: exact for confidences
with at most 3 decimals, turns, outcomes and weights; seconds to escalation rounded up to the
upper edge of a 2^(1/16) bucket (at most 4.4 % above, or 1 ms for the first bucket) for the
conversations read from the roll-up. The roll-up keeps the timing of escalated conversations
apart from their confidence and outcome; the read pairs them per (agent, weight), so a
returned conversation may carry another escalated conversation's timing: every analytic
(rates, bins, inversion test, thresholds, advisor, time-to-escalation quantiles) gives the
same result, since none reads timing jointly with confidence or outcome. Within an agent,
conversations come in key order (float sums may differ in the last bits).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.escalation import ConversationEscalation
from monitor.analytics.repo import Segment
from monitor.store.tables_rollups import SECONDS_BASE, SECONDS_PER_DOUBLING

_HOUR = timedelta(hours=1)
_DAY = timedelta(days=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_PER_ROW = (
    "SELECT c.agent_id, c.min_confidence, c.escalated, c.outcome_success, c.sample_weight,"
    " c.escalation_turn - coalesce(c.first_turn, 0) AS turns,"
    " extract(epoch FROM c.escalated_at - c.first_ts)::float8 AS seconds, NULL::smallint,"
    " 1::bigint, NULL::smallint"
    " FROM conversations c WHERE c.sample_weight > 0 AND {cond}"
)
_BINS = (
    "SELECT agent_id, CASE WHEN conf_milli >= 0 THEN conf_milli::float8 / 1000 END, escalated,"
    " CASE outcome WHEN 1 THEN true WHEN 0 THEN false END, weight,"
    " CASE WHEN turns >= 0 THEN turns END, NULL::float8,"
    " CASE WHEN seconds_bucket >= 0 THEN seconds_bucket END, sum(conversations)::bigint, kind"
    " FROM escalation_bins WHERE kind IN (0, 1) AND {cond}"  # 2, 3: kind 1's marginals
    " GROUP BY kind, 1, 2, 3, 4, 5, 6, 8 HAVING sum(conversations) > 0"
)


def _floor(t: datetime, step: timedelta) -> datetime:
    return _EPOCH + (t - _EPOCH) // step * step


def _ceil(t: datetime, step: timedelta) -> datetime:
    f = _floor(t, step)
    return f if f == t else f + step


def split_range(start: datetime, end: datetime) -> dict[str, datetime]:
    """The parts of ``[start, end)``: ``[lo, h_lo)`` and ``[h_hi, hi)`` per row, ``[h_lo,
    d_lo)`` and ``[d_hi, h_hi)`` from the hourly rows, ``[d_lo, d_hi)`` from the daily rows
    (UTC days and hours); empty parts have equal bounds."""
    lo, hi = start.astimezone(UTC), max(end.astimezone(UTC), start.astimezone(UTC))
    h_lo, h_hi = _ceil(lo, _HOUR), _floor(hi, _HOUR)
    if h_lo >= h_hi:
        h_lo = h_hi = hi
    d_lo, d_hi = _ceil(h_lo, _DAY), _floor(h_hi, _DAY)
    if d_lo >= d_hi:
        d_lo = d_hi = h_hi
    return {"lo": lo, "h_lo": h_lo, "d_lo": d_lo, "d_hi": d_hi, "h_hi": h_hi, "hi": hi}


def seconds_of_bucket(bucket: int) -> float:
    """The value read back for a ``seconds_bucket``: its upper edge, 0 for bucket 0."""
    return 0.0 if bucket == 0 else SECONDS_BASE * 2.0 ** (bucket / SECONDS_PER_DOUBLING)


def _conversation(row: Any) -> ConversationEscalation:
    _agent, conf, esc, ok, w, turns, secs, bucket = row[:8]
    if bucket is not None:
        secs = seconds_of_bucket(int(bucket))
    return ConversationEscalation(
        min_confidence=conf,
        escalated=bool(esc),
        success=ok,
        weight=float(w),
        escalation_turn=int(turns) if esc and turns is not None else None,
        escalation_seconds=max(0.0, float(secs)) if esc and secs is not None else None,
    )


def _expand(rows: list[Any]) -> dict[str, list[ConversationEscalation]]:
    """Rows ``(agent, conf, escalated, success, weight, turns, seconds, seconds_bucket,
    count, kind)`` -> conversations; kind NULL = a whole conversation, 0 = without timing,
    1 = the timing of escalated conversations, paired with the kind-0 escalated ones of the
    same agent and weight (equal in number: every escalated sampled conversation has one row
    of each kind). A row of count n becomes n references to one object, and the pairing works
    on runs, so the cost grows with the number of rows, not of conversations."""
    out: dict[str, list[ConversationEscalation]] = {}
    waiting: dict[tuple[str, float], list[tuple[ConversationEscalation, int]]] = {}
    timings: dict[tuple[str, float], list[tuple[ConversationEscalation, int]]] = {}
    for row in rows:
        agent, n, kind = row[0], int(row[8]), row[9]
        conv = _conversation(row)
        if kind is None or (kind == 0 and not conv.escalated):
            out.setdefault(agent, []).extend([conv] * n)
        else:
            into = waiting if kind == 0 else timings
            into.setdefault((agent, conv.weight), []).append((conv, n))
    for key, convs in waiting.items():
        times = timings.get(key, [])
        n_convs, n_times = sum(n for _, n in convs), sum(n for _, n in times)
        if n_convs != n_times:
            raise ValueError(
                f"escalation_bins out of step for {key}: {n_convs} escalated"
                f" conversations, {n_times} timings"
            )
        out.setdefault(key[0], []).extend(_pair(convs, times))
    return out


def _pair(
    convs: list[tuple[ConversationEscalation, int]], times: list[tuple[ConversationEscalation, int]]
) -> list[ConversationEscalation]:
    """The k-th conversation with the k-th timing, both given as runs ``(object, count)`` of
    equal totals."""
    out: list[ConversationEscalation] = []
    i = j = 0
    left_c, left_t = convs[0][1], times[0][1]
    while True:
        n = min(left_c, left_t)
        c, t = convs[i][0], times[j][0]
        out.extend(
            [replace(c, escalation_turn=t.escalation_turn, escalation_seconds=t.escalation_seconds)]
            * n
        )
        left_c, left_t = left_c - n, left_t - n
        if left_c == 0:
            i += 1
            if i == len(convs):
                return out
            left_c = convs[i][1]
        if left_t == 0:
            j += 1
            left_t = times[j][1]


async def escalation_conversations(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> dict[str, list[ConversationEscalation]]:
    """Per agent, the conversations (first event in ``[start, end)``, weight > 0) as
    escalation inputs, from the roll-up (module docstring). ``escalation_turn`` counts turns
    from the conversation's first turn; seconds are from its first event."""
    conv_cond, params = segment.where_conversations()
    bin_cond, _ = segment.where()
    edges = (
        "((c.first_ts >= :lo AND c.first_ts < :h_lo) OR (c.first_ts >= :h_hi AND c.first_ts < :hi))"
    )
    hours = (
        "resolution = '1h' AND ((window_start >= :h_lo AND window_start < :d_lo)"
        " OR (window_start >= :d_hi AND window_start < :h_hi))"
    )
    days = "resolution = '1d' AND window_start >= :d_lo AND window_start < :d_hi"
    sql = (
        " UNION ALL ".join(
            [
                _PER_ROW.format(cond=f"{edges} AND {conv_cond}"),
                _BINS.format(cond=f"({hours} OR {days}) AND {bin_cond}"),
            ]
        )
        + " ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 10"
    )
    async with engine.connect() as conn:
        rows = list((await conn.execute(text(sql), {**split_range(start, end), **params})).all())
    return _expand(rows)


async def escalation_conversations_per_row(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime
) -> dict[str, list[ConversationEscalation]]:
    """The same as :func:`escalation_conversations`, one row per conversation from
    ``conversations`` (exact seconds; the reference the roll-up is tested against)."""
    cond, params = segment.where_conversations()
    sql = _PER_ROW.format(cond=f"c.first_ts >= :lo AND c.first_ts < :hi AND {cond}")
    sql += " ORDER BY c.agent_id, c.first_ts, c.conversation_id"
    async with engine.connect() as conn:
        rows = list((await conn.execute(text(sql), {"lo": start, "hi": end, **params})).all())
    return _expand(rows)
