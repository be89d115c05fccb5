"""Alert evaluation: observations -> lifecycle -> grouping -> state + history + outbox.

:func:`evaluate_once` runs one evaluation at ``now``:

1. computes the observations of every rule (:func:`monitor.alerts.observations.observe`, read
   only, outside any transaction);
2. opens ONE transaction and takes a transaction-level advisory lock (:data:`WRITE_LOCK`), so
   concurrent evaluations (two workers, a worker and a manual run) are serialized; inside it
   re-reads the stored states and the active silences;
3. steps each fingerprint with :func:`monitor.alerts.lifecycle.evaluate` (pending and firing
   states without an observation get a "no data" one, so their repeats and owed pages still
   happen), saves every changed state with compare-and-swap on its version (a lost race, e.g.
   against a concurrent ``alerts ack``, drops that fingerprint's notifications: whoever won
   owns them; it is re-evaluated next time);
4. passes the accepted notifications through the incident step
   (:func:`monitor.alerts.incidents.step`, state in ``alert_incidents``: an agent's alerts that
   are open together page once; each notification gets its incident and role), records them in
   ``alert_history``, stores the exemplars of the alerts that fired and promotes their
   conversations into the kept sample (:func:`monitor.alerts.exemplar_repo.record`), passes the
   notifications through grouping (:func:`monitor.alerts.grouping.step`, state in
   ``alert_groups``), and inserts one outbox row per flushed batch and configured sink (with its
   members' exemplars);
5. commits: the state changes, incidents, history, exemplars, grouping state and outbox rows
   become visible together or not at all. The notifier delivers from the outbox afterwards.

:func:`run` is the timer loop with leader election: several workers may call it; each first
tries ``pg_try_advisory_lock(LEADER_LOCK)`` on a dedicated connection (session level). The
holder evaluates every ``interval_s`` (earlier when a notification group becomes due); the
others retry every ``interval_s``. When the leader stops its lock is released explicitly; when
it dies, Postgres releases the lock as soon as its session ends (process exit closes the socket;
a vanished host is noticed by TCP keepalives), and the next candidate to retry takes over. A
leader that loses its connection steps down at once. Even two leaders at the same time (a
network partition) cannot send a page twice: steps 2-3 serialize them and compare-and-swap
rejects stale states, and outbox rows are unique per (idempotency key, sink).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from monitor.alerts import exemplar_repo, grouping, incidents
from monitor.alerts import repo as alerts_repo
from monitor.alerts.exemplars import DEFAULT_LIMIT
from monitor.alerts.lifecycle import Observation, evaluate
from monitor.alerts.observations import LagSource, observe
from monitor.alerts.outbox import enqueue
from monitor.alerts.rule_models import RuleSet
from monitor.alerts.states import AlertState, Notification, Status
from monitor.core.clock import Clock

log = logging.getLogger(__name__)

LEADER_LOCK = 0x6D6F6E_0A1E_0001
"""Session-level advisory lock key held by the evaluating leader (:func:`run`)."""
WRITE_LOCK = 0x6D6F6E_0A1E_0002
"""Transaction-level advisory lock key serializing the write phase of evaluations."""


@dataclass(frozen=True)
class EvaluationReport:
    """What one :func:`evaluate_once` did.

    ``observations``: observations computed; ``evaluated``: fingerprints stepped; ``changed``:
    states written; ``conflicts``: fingerprints whose compare-and-swap lost (notifications
    dropped); ``notifications``: notifications accepted (history rows); ``batches``: grouped
    notifications flushed; ``outbox_rows``: rows inserted; ``firing``/``pending``: fingerprints
    in that status afterwards; ``flapping``: fingerprint -> rule of the alerts marked flapping
    afterwards (notifications held); ``next_due_at``: when a held notification group becomes
    due. ``pages``: the accepted notifications that page (open an incident or re-page it);
    ``open_incidents``: incidents open afterwards; ``incident_updates``: accepted
    notifications that were updates of an incident; ``exemplars``: exemplar rows stored for
    the alerts that fired.
    """

    at: datetime
    observations: int = 0
    evaluated: int = 0
    changed: int = 0
    conflicts: int = 0
    notifications: list[Notification] = field(default_factory=list)
    batches: list[grouping.GroupedNotification] = field(default_factory=list)
    outbox_rows: int = 0
    firing: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    flapping: dict[str, str] = field(default_factory=dict)
    next_due_at: datetime | None = None
    pages: list[Notification] = field(default_factory=list)
    open_incidents: int = 0
    incident_updates: int = 0
    exemplars: int = 0


async def evaluate_once(
    engine: AsyncEngine,
    rules: RuleSet,
    now: datetime,
    sinks: Sequence[str],
    *,
    lag: LagSource | None = None,
    stall: LagSource | None = None,
    exemplars: int = DEFAULT_LIMIT,
) -> EvaluationReport:
    """Evaluate every rule at ``now`` (aware) and commit the results (module docstring).

    ``sinks`` names the configured sinks: each flushed batch gets one outbox row per name (no
    sinks: states and history are still kept, nothing is queued). ``lag`` feeds the
    ``consumer_lag`` rules, ``stall`` the ``ingest_stall_s`` rules. ``exemplars``: at most that
    many exemplars per alert that fires (0: none chosen, nothing promoted). Database errors
    propagate; nothing is committed then.
    """
    observations = await observe(engine, rules, now, lag=lag, stall=stall)
    by_name = {r.name: r for r in rules.rules}
    policy = grouping.GroupingPolicy.from_rules(rules)
    incident_policy = incidents.IncidentPolicy.from_rules(rules)
    async with engine.begin() as conn:
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": WRITE_LOCK})
        obs = {o.fingerprint: o for o in observations}
        stored = await alerts_repo.load_states(conn, list(obs))
        for fp, st in (await alerts_repo.load_open_states(conn)).items():
            rule = by_name.get(st.rule)
            if fp not in obs and rule is not None and rule.scope.matches(st.scope):
                obs[fp] = Observation(st.rule, st.scope, None, 0.0, now)
                stored[fp] = st
        silences = await alerts_repo.active_silences(conn, now)
        accepted: list[Notification] = []
        changed = conflicts = 0
        after: dict[str, AlertState] = {}
        firing: set[str] = set()
        fired: list[AlertState] = []
        for fp, o in obs.items():
            old = stored.get(fp)
            new, notes = evaluate(by_name[o.rule], old, o, now, silences)
            after[fp] = new
            kept: AlertState | None = new
            if new is old or (old is None and new.version == 0):
                pass
            elif await alerts_repo.save_state(conn, new, None if old is None else old.version):
                changed += 1
                accepted.extend(notes)
                if new.status is Status.FIRING and (old is None or old.fired_at != new.fired_at):
                    fired.append(new)
            else:
                kept = old
                conflicts += 1
                log.info("alert %s changed concurrently; its notifications are skipped", fp)
            if kept is not None and kept.status is Status.FIRING:
                firing.add(fp)
        live = await alerts_repo.load_live_incidents(conn, now, incident_policy.window)
        joined = incidents.step(live, accepted, firing, incident_policy, now)
        accepted = list(joined.notifications)
        await alerts_repo.save_incidents(conn, [joined.incidents[i] for i in joined.changed])
        await alerts_repo.record_history(conn, accepted)
        chosen = await exemplar_repo.record(conn, by_name, fired, now, exemplars)
        groups = await alerts_repo.load_groups(conn, lock=True)
        result = grouping.step(groups, accepted, policy, now)
        await alerts_repo.save_groups(conn, groups, result.groups)
        payloads = await exemplar_repo.attach(conn, [_payload(b, rules) for b in result.ready])
        rows = await enqueue(conn, payloads, sinks, now)
    dues = [d for g in result.groups.values() if (d := g.due_at(policy)) is not None]
    return EvaluationReport(
        at=now,
        observations=len(observations),
        evaluated=len(obs),
        changed=changed,
        conflicts=conflicts,
        notifications=accepted,
        batches=result.ready,
        outbox_rows=rows,
        firing=sorted(fp for fp, s in after.items() if s.status is Status.FIRING),
        pending=sorted(fp for fp, s in after.items() if s.status is Status.PENDING),
        flapping={fp: s.rule for fp, s in sorted(after.items()) if s.flapping},
        next_due_at=min(dues, default=None),
        pages=list(joined.pages),
        open_incidents=sum(1 for i in joined.incidents.values() if i.resolved_at is None),
        incident_updates=sum(1 for n in accepted if n.incident_role in ("update", "close")),
        exemplars=chosen,
    )


def _payload(batch: grouping.GroupedNotification, rules: RuleSet) -> dict[str, Any]:
    """The outbox payload of a batch: ``GroupedNotification.to_dict()``, plus
    ``"redact_customer_content": false`` when every member's rule opted in to customer
    content (the sinks then leave it unredacted)."""
    payload = batch.to_dict()
    allowed = {r.name for r in rules.rules if not r.redact_customer_content}
    if batch.notifications and all(n.rule in allowed for n in batch.notifications):
        payload["redact_customer_content"] = False
    return payload


async def _try_lead(engine: AsyncEngine) -> AsyncConnection | None:
    """A connection holding :data:`LEADER_LOCK`, or None (held elsewhere or unreachable)."""
    conn: AsyncConnection | None = None
    try:
        conn = await engine.connect()
        got = await conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": LEADER_LOCK})
        if got.scalar_one():
            await conn.commit()  # end the implicit transaction; the session lock stays
            return conn
    except (OSError, DBAPIError, OperationalError) as exc:
        log.warning("alert leader election failed: %s", exc)
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.close()
    return None


async def _still_leader(conn: AsyncConnection) -> bool:
    """True while the lock connection is alive (a dead session has lost the lock)."""
    try:
        await conn.execute(text("SELECT 1"))
        await conn.commit()
        return True
    except (OSError, DBAPIError, OperationalError):
        return False


async def _resign(conn: AsyncConnection) -> None:
    with contextlib.suppress(Exception):
        await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LEADER_LOCK})
        await conn.commit()
    with contextlib.suppress(Exception):
        await conn.invalidate()  # never return a lock-holding session to the pool


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=max(0.0, seconds))


async def run(
    engine: AsyncEngine,
    rules: RuleSet,
    sinks: Sequence[str],
    stop: asyncio.Event,
    interval_s: float,
    clock: Clock,
    *,
    lag: LagSource | None = None,
    stall: LagSource | None = None,
    on_report: Callable[[EvaluationReport], None] | None = None,
    exemplars: int = DEFAULT_LIMIT,
) -> None:
    """Evaluate on a timer while leader, until ``stop`` is set (module docstring).

    Each cycle: ``evaluate_once(engine, rules, clock.now(), sinks, lag=lag, stall=stall,
    exemplars=exemplars)``, then
    ``on_report(report)``; the next cycle starts ``interval_s`` later, or when the earliest
    notification group is due if sooner. An evaluation that fails is logged and retried next
    cycle (never fatal). Returns after releasing the leader lock.
    """
    leader: AsyncConnection | None = None
    try:
        while not stop.is_set():
            if leader is None:
                leader = await _try_lead(engine)
                if leader is None:
                    await _sleep(stop, interval_s)
                    continue
                log.info("alert evaluation: this worker is the leader")
            if not await _still_leader(leader):
                log.warning("alert evaluation: lost the leader connection; stepping down")
                await _resign(leader)
                leader = None
                continue
            wait = interval_s
            try:
                report = await evaluate_once(
                    engine, rules, clock.now(), sinks, lag=lag, stall=stall, exemplars=exemplars
                )
            except Exception:  # an evaluation failure must never kill the loop
                log.exception("alert evaluation failed")
            else:
                if on_report is not None:
                    on_report(report)
                if report.next_due_at is not None:
                    due = (report.next_due_at - report.at) / timedelta(seconds=1)
                    wait = min(wait, max(0.05, due))
            await _sleep(stop, wait)
    finally:
        if leader is not None:
            await _resign(leader)
