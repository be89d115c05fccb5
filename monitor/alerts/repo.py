"""Alert state in Postgres: lifecycle states (compare-and-swap), silences, acks, grouping state,
incidents and the alert history (the outbox rows are inserted by
:func:`monitor.alerts.outbox.enqueue`).

Every function takes an open ``AsyncConnection`` and never commits: the caller owns the
transaction, so a state change, its history rows, the grouping state and the outbox rows it
causes are committed together or not at all (transactional outbox).

Compare-and-swap: a state row carries ``version`` (= ``AlertState.version``). :func:`save_state`
updates only ``WHERE version = <the version the caller read>`` and inserts a new fingerprint
with ``ON CONFLICT DO NOTHING``; it returns False when another writer got there first, in
which case the caller must drop the notifications it derived from the stale state (another
worker evaluated and emitted them). Under READ COMMITTED a racing UPDATE waits for the other
transaction and then re-checks the version, so exactly one of two racers wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from monitor.alerts.grouping import Group
from monitor.alerts.incidents import Incident
from monitor.alerts.lifecycle import acknowledge
from monitor.alerts.silences import Ack, Matcher, Silence
from monitor.alerts.states import AlertState, Notification, Status
from monitor.store.tables_alerts import (
    alert_groups,
    alert_history,
    alert_incidents,
    alert_silences,
    alert_states,
)

# --- lifecycle states -----------------------------------------------------------------------


async def load_states(
    conn: AsyncConnection, fingerprints: Iterable[str] | None = None
) -> dict[str, AlertState]:
    """Stored states by fingerprint: those of ``fingerprints`` (missing ones absent), or all."""
    q = select(alert_states.c.state)
    if fingerprints is not None:
        fps = sorted(set(fingerprints))
        if not fps:
            return {}
        q = q.where(alert_states.c.fingerprint.in_(fps))
    rows: Sequence[Any] = (await conn.execute(q)).scalars().all()
    out = [AlertState.from_dict(r) for r in rows]
    return {s.fingerprint: s for s in out}


async def load_open_states(conn: AsyncConnection) -> dict[str, AlertState]:
    """Stored states that are pending or firing (they must be evaluated even without data)."""
    q = select(alert_states.c.state).where(
        alert_states.c.status.in_([Status.PENDING.value, Status.FIRING.value])
    )
    rows: Sequence[Any] = (await conn.execute(q)).scalars().all()
    return {s.fingerprint: s for s in (AlertState.from_dict(r) for r in rows)}


async def save_state(conn: AsyncConnection, new: AlertState, old_version: int | None) -> bool:
    """Compare-and-swap ``new`` over the stored state read at ``old_version``.

    ``old_version`` None means the fingerprint had no row: insert, unless one appeared
    meanwhile. Returns True when written, False when another writer changed (or created) the
    row first. ``new.version`` must be greater than ``old_version`` (ValueError otherwise).
    """
    if old_version is not None and new.version <= old_version:
        raise ValueError(f"version {new.version} does not advance {old_version}")
    values: dict[str, Any] = {
        "rule": new.rule,
        "scope": dict(new.scope),
        "status": new.status.value,
        "state": new.to_dict(),
        "version": new.version,
        "updated_at": func.now(),
    }
    stmt: Any
    if old_version is None:
        stmt = (
            insert(alert_states)
            .values(fingerprint=new.fingerprint, **values)
            .on_conflict_do_nothing(index_elements=["fingerprint"])
        )
    else:
        stmt = (
            update(alert_states)
            .where(alert_states.c.fingerprint == new.fingerprint)
            .where(alert_states.c.version == old_version)
            .values(**values)
        )
    result = await conn.execute(stmt)
    return result.rowcount == 1


async def list_states(conn: AsyncConnection, include_inactive: bool = False) -> list[AlertState]:
    """Stored states, firing first, then pending, then resolved (inactive only when asked)."""
    order = {Status.FIRING: 0, Status.PENDING: 1, Status.RESOLVED: 2, Status.INACTIVE: 3}
    states = (await load_states(conn)).values()
    kept = [s for s in states if include_inactive or s.status is not Status.INACTIVE]
    return sorted(kept, key=lambda s: (order[s.status], s.rule, s.fingerprint))


async def find_state(conn: AsyncConnection, prefix: str) -> AlertState:
    """The state whose fingerprint is ``prefix`` or starts with it (at least 4 characters).

    Raises LookupError when none or several match.
    """
    if len(prefix) < 4:
        raise LookupError("give at least 4 characters of the fingerprint")
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    q = select(alert_states.c.state).where(alert_states.c.fingerprint.like(escaped + "%"))
    rows: Sequence[Any] = (await conn.execute(q.limit(2))).scalars().all()
    if len(rows) != 1:
        raise LookupError(f"{'no' if not rows else 'more than one'} alert matches {prefix!r}")
    return AlertState.from_dict(rows[0])


async def ack(conn: AsyncConnection, given: Ack, severity: str = "") -> AlertState:
    """Acknowledge the firing alert ``given.fingerprint`` (compare-and-swap, retried) and
    record it in ``alert_history`` (kind ``ack``, ``summary`` = who and the comment).

    Raises LookupError when the fingerprint is unknown, ValueError when it is not firing.
    """
    for _ in range(5):
        current = (await load_states(conn, [given.fingerprint])).get(given.fingerprint)
        if current is None:
            raise LookupError(f"no alert with fingerprint {given.fingerprint!r}")
        new = acknowledge(current, given)
        if await save_state(conn, new, current.version):
            comment = f": {given.comment}" if given.comment else ""
            row = {
                "fingerprint": new.fingerprint,
                "rule": new.rule,
                "kind": "ack",
                "severity": severity,
                "scope": dict(new.scope),
                "value": new.last_value,
                "summary": f"acknowledged by {given.created_by}{comment}",
                "at": given.at,
                "idempotency_key": f"{new.episode}:ack:{given.at.isoformat()}",
            }
            await conn.execute(
                insert(alert_history)
                .values(row)
                .on_conflict_do_nothing(index_elements=["idempotency_key"])
            )
            return new
    raise RuntimeError(f"alert {given.fingerprint} keeps changing; try again")


# --- silences -------------------------------------------------------------------------------


def _silence(row: Any) -> Silence:
    return Silence(
        id=row["id"],
        matchers=tuple(Matcher(m["label"], m["pattern"]) for m in row["matchers"]),
        starts_at=row["starts_at"],
        ends_at=row["ends_at"],
        reason=row["reason"],
        created_by=row["created_by"],
    )


async def create_silence(conn: AsyncConnection, silence: Silence) -> None:
    """Store ``silence`` (its ``id`` must be new: IntegrityError otherwise)."""
    d = silence.to_dict()
    await conn.execute(
        insert(alert_silences).values(
            id=silence.id,
            matchers=d["matchers"],
            starts_at=silence.starts_at,
            ends_at=silence.ends_at,
            reason=silence.reason,
            created_by=silence.created_by,
        )
    )


async def list_silences(
    conn: AsyncConnection, now: datetime, include_ended: bool = False
) -> list[Silence]:
    """Silences not ended at ``now`` (active or scheduled), or all; by start time."""
    q = select(alert_silences).order_by(alert_silences.c.starts_at, alert_silences.c.id)
    if not include_ended:
        q = q.where(alert_silences.c.ends_at > now)
    rows = (await conn.execute(q)).mappings().all()
    return [_silence(r) for r in rows]


async def active_silences(conn: AsyncConnection, now: datetime) -> list[Silence]:
    """Silences active at ``now`` (``starts_at <= now < ends_at``)."""
    return [s for s in await list_silences(conn, now) if s.active(now)]


async def expire_silence(conn: AsyncConnection, silence_id: str, now: datetime) -> Silence:
    """End silence ``silence_id`` at ``now`` (``Silence.expire``); returns it as stored.

    Raises LookupError when no silence has this id.
    """
    row = (
        (await conn.execute(select(alert_silences).where(alert_silences.c.id == silence_id)))
        .mappings()
        .first()
    )
    if row is None:
        raise LookupError(f"no silence with id {silence_id!r}")
    ended = _silence(row).expire(now)
    await conn.execute(
        update(alert_silences)
        .where(alert_silences.c.id == silence_id)
        .values(ends_at=ended.ends_at, expired_at=func.coalesce(alert_silences.c.expired_at, now))
    )
    return ended


# --- grouping -------------------------------------------------------------------------------


async def load_groups(conn: AsyncConnection, lock: bool = False) -> dict[str, Group]:
    """The stored grouping state by group key (``lock``: ``FOR UPDATE`` the rows)."""
    q = select(alert_groups.c.state)
    if lock:
        q = q.with_for_update()
    rows: Sequence[Any] = (await conn.execute(q)).scalars().all()
    return {g.key: g for g in (Group.from_dict(r) for r in rows)}


async def save_groups(
    conn: AsyncConnection, before: Mapping[str, Group], after: Mapping[str, Group]
) -> None:
    """Persist ``after`` (upsert changed groups, delete groups that ``after`` dropped)."""
    gone = sorted(set(before) - set(after))
    if gone:
        await conn.execute(delete(alert_groups).where(alert_groups.c.group_key.in_(gone)))
    for key, group in sorted(after.items()):
        if before.get(key) == group:
            continue
        stmt = insert(alert_groups).values(group_key=key, state=group.to_dict())
        await conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["group_key"],
                set_={"state": stmt.excluded.state, "updated_at": func.now()},
            )
        )


# --- history ---------------------------------------------------------------------


async def record_history(conn: AsyncConnection, notifications: Sequence[Notification]) -> int:
    """One ``alert_history`` row per notification (idempotent on its key); returns new rows."""
    rows = [
        {
            "fingerprint": n.fingerprint,
            "rule": n.rule,
            "kind": n.kind.value,
            "severity": n.severity,
            "scope": dict(n.scope),
            "value": n.value,
            "estimate": n.estimate,
            "samples": n.samples,
            "threshold": n.threshold,
            "summary": n.summary,
            "at": n.created_at,
            "idempotency_key": n.idempotency_key,
            "incident_id": n.incident_id,
        }
        for n in notifications
    ]
    if not rows:
        return 0
    stmt = (
        insert(alert_history)
        .values(rows)
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
    )
    return int((await conn.execute(stmt)).rowcount)


async def history(conn: AsyncConnection, fingerprint: str | None = None) -> list[dict[str, Any]]:
    """History rows (oldest first), of one fingerprint or all."""
    q = select(alert_history).order_by(alert_history.c.at, alert_history.c.id)
    if fingerprint is not None:
        q = q.where(alert_history.c.fingerprint == fingerprint)
    return [dict(r) for r in (await conn.execute(q)).mappings().all()]


# --- incidents ------------------------------------------------------------------------------


async def load_live_incidents(
    conn: AsyncConnection, now: datetime, window: timedelta
) -> list[Incident]:
    """Incidents a new alert may join at ``now``: open, or resolved at most ``window`` ago."""
    q = select(alert_incidents.c.state).where(
        (alert_incidents.c.status == "open") | (alert_incidents.c.resolved_at >= now - window)
    )
    rows: Sequence[Any] = (await conn.execute(q)).scalars().all()
    return [Incident.from_dict(r) for r in rows]


async def save_incidents(conn: AsyncConnection, incidents: Iterable[Incident]) -> None:
    """Insert or update each incident (by id). The caller serializes writers (the
    evaluation's write lock), so the last write is the current one."""
    for inc in incidents:
        values: dict[str, Any] = {
            "incident_key": inc.key,
            "labels": dict(inc.labels),
            "status": inc.status,
            "severity": inc.severity,
            "opened_at": inc.opened_at,
            "resolved_at": inc.resolved_at,
            "members": [m.fingerprint for m in inc.members],
            "pages": inc.pages,
            "state": inc.to_dict(),
            "version": inc.version,
        }
        stmt = insert(alert_incidents).values(id=inc.id, **values)
        await conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["id"], set_={**values, "updated_at": func.now()}
            )
        )


async def find_incident(conn: AsyncConnection, prefix: str) -> Incident:
    """The incident whose id is ``prefix`` or starts with it (``inc-`` and at least 4 hex
    digits). Raises LookupError when none or several match."""
    if not prefix.startswith("inc-") or len(prefix) < 8:
        raise LookupError("give an incident id: inc- and at least 4 of its hex digits")
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    q = select(alert_incidents.c.state).where(alert_incidents.c.id.like(escaped + "%"))
    rows: Sequence[Any] = (await conn.execute(q.limit(2))).scalars().all()
    if len(rows) != 1:
        raise LookupError(f"{'no' if not rows else 'more than one'} incident matches {prefix!r}")
    return Incident.from_dict(rows[0])


async def list_incidents(
    conn: AsyncConnection, include_resolved: bool = False, limit: int = 200
) -> list[Incident]:
    """Incidents, open ones first, then by opening time, newest first (resolved ones only when
    asked; at most ``limit``)."""
    q = select(alert_incidents.c.state).order_by(
        (alert_incidents.c.status == "open").desc(), alert_incidents.c.opened_at.desc()
    )
    if not include_resolved:
        q = q.where(alert_incidents.c.status == "open")
    rows: Sequence[Any] = (await conn.execute(q.limit(limit))).scalars().all()
    return [Incident.from_dict(r) for r in rows]
