"""Backtest alert rules over stored history without touching live alert state.

:func:`backtest` walks ``[start, end]`` in ``step``s with the worker's own code: the tracked
drift checks every ``drift_every`` (:func:`monitor.analytics.periodic.drift_once`, pinned
references evolving as in the worker) and the rule evaluation at every step
(:func:`monitor.alerts.evaluate.evaluate_once`: observations, lifecycle with hysteresis and
flap detection, grouping, outbox). Nothing is delivered, and no exemplars are chosen (choosing
them promotes live events into the kept sample).

Isolation: the run gets a scratch schema holding empty copies (same columns, defaults, keys and
constraint names, its own sequences) of the tables those functions write, :data:`SHADOWED`,
and an engine whose ``search_path`` puts that schema before the live one; every other table
(events, calibration sums, conversations, verdicts) is read from the live schema. Live alert
states, history, silences, groups, outbox, drift checks and drift references are never read or
written, and the schema is dropped at the end (also on error). The evaluations take the same
transaction-level advisory lock as the worker's, so each step briefly queues behind a live
evaluation (and the other way round); they never share state.

:func:`summarize` (pure) turns the steps into per rule and segment figures: alerts fired
(``firing`` notifications), pages among them (the ones that opened or re-paged an incident,
:mod:`monitor.alerts.incidents`; the others joined an open one), episodes (times it started
firing, announced or not), time firing, flaps (``flapping`` notifications) and the first firing
after each marked change. :func:`summarize_incidents` (pure) lists the incidents the walk
opened with their alerts, pages and updates: the same incidents the worker stores on the same
history, since the walk runs the worker's evaluation.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from monitor.alerts.evaluate import evaluate_once
from monitor.alerts.incidents import Incident, Role
from monitor.alerts.rule_models import RuleSet, Scope
from monitor.alerts.states import Kind, Notification
from monitor.analytics.drift_policy import MIN_REFERENCE
from monitor.analytics.periodic import DEFAULT_REFERENCE, drift_once
from monitor.core.clock import FixedClock

SHADOWED = (
    "alert_states",
    "alert_history",
    "alert_groups",
    "alert_incidents",
    "alert_silences",
    "notification_outbox",
    "alert_exemplars",
    "drift_checks",
    "drift_references",
)
"""Tables the worker's drift checks and evaluations write (or read as their own state)."""
SINK = "backtest"


@dataclass(frozen=True)
class Step:
    """One evaluation of the walk: its time, the notifications it emitted, and the
    fingerprints firing afterwards."""

    at: datetime
    notifications: tuple[Notification, ...]
    firing: frozenset[str]


@dataclass(frozen=True)
class Change:
    """A change the user marks: ``agent`` (a glob) changed at ``at``."""

    agent: str
    at: datetime


@dataclass
class RuleSegment:
    """Figures of one rule on one segment (``scope``) over the walk: ``fired`` firing
    notifications, ``pages`` of them paged (opened or re-paged an incident, or belonged to
    none), ``first_fired_after``: minutes from each change to the first firing notification."""

    rule: str
    scope: dict[str, str]
    fired: int = 0
    pages: int = 0
    episodes: int = 0
    firing_s: float = 0.0
    flaps: int = 0
    fired_times: list[datetime] = field(default_factory=list)
    first_fired_after: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures (first firing after a change: minutes, None when none came)."""
        return {
            "rule": self.rule,
            "scope": self.scope,
            "fired": self.fired,
            "pages": self.pages,
            "episodes": self.episodes,
            "firing_minutes": round(self.firing_s / 60, 1),
            "flaps": self.flaps,
            "first_fired_after_change_min": self.first_fired_after,
        }


@dataclass(frozen=True)
class IncidentSummary:
    """One incident of the walk: its alerts (rules, in the order they joined), pages
    (1, 2 after a re-page) and updates."""

    id: str
    key: str
    opened_at: datetime
    resolved_at: datetime | None
    severity: str
    alerts: tuple[str, ...]
    pages: int
    updates: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "id": self.id,
            "key": self.key,
            "opened_at": self.opened_at.isoformat(),
            "resolved_at": None if self.resolved_at is None else self.resolved_at.isoformat(),
            "severity": self.severity,
            "alerts": list(self.alerts),
            "pages": self.pages,
            "updates": self.updates,
        }


def summarize_incidents(incidents: Iterable[Incident]) -> list[IncidentSummary]:
    """The incidents (as stored at the end of the walk), by opening time then key."""
    return sorted(
        (
            IncidentSummary(
                i.id,
                i.key,
                i.opened_at,
                i.resolved_at,
                i.severity,
                tuple(m.rule for m in i.members),
                i.pages,
                i.updates,
            )
            for i in incidents
        ),
        key=lambda s: (s.opened_at, s.key),
    )


def only_agent(rules: RuleSet, agent: str) -> RuleSet:
    """The rules restricted to segments of ``agent``: rules whose scope cannot match it are
    dropped, the others get ``scope.agent = agent`` (global rules, which have no agent, go)."""
    kept = []
    for r in rules.rules:
        if r.scope.agent is not None and not fnmatchcase(agent, r.scope.agent):
            continue
        scope = Scope(agent=agent, domain=r.scope.domain, tier=r.scope.tier)
        kept.append(r.model_copy(update={"scope": scope}))
    return rules.model_copy(update={"rules": tuple(kept)})


def summarize(
    steps: Sequence[Step],
    identities: Mapping[str, tuple[str, Mapping[str, str]]],
    step: timedelta,
    changes: Iterable[Change] = (),
) -> list[RuleSegment]:
    """Per fingerprint seen (``identities``: fingerprint -> rule, scope), the figures of the
    walk (module docstring); a step's firing time counts ``step``. Sorted by rule, scope."""
    out: dict[str, RuleSegment] = {}

    def row(fp: str) -> RuleSegment:
        if fp not in out:
            rule, scope = identities.get(fp, ("?", {}))
            out[fp] = RuleSegment(rule, dict(scope))
        return out[fp]

    before: frozenset[str] = frozenset()
    for s in steps:
        for fp in s.firing - before:
            row(fp).episodes += 1
        for fp in s.firing:
            row(fp).firing_s += step.total_seconds()
        for n in s.notifications:
            r = row(n.fingerprint)
            if n.kind is Kind.FIRING:
                r.fired += 1
                r.fired_times.append(n.created_at)
            elif n.kind is Kind.FLAPPING:
                r.flaps += 1
            if n.incident_role is None:
                r.pages += n.kind is Kind.FIRING
            else:
                r.pages += Role(n.incident_role).pages
        before = s.firing
    for fp in identities:
        row(fp)
    for r in out.values():
        for c in changes:
            if fnmatchcase(r.scope.get("agent", ""), c.agent):
                after = [t for t in r.fired_times if t >= c.at]
                key = f"{c.agent}@{c.at.isoformat()}"
                r.first_fired_after[key] = (
                    round((min(after) - c.at) / timedelta(minutes=1), 1) if after else None
                )
    return sorted(out.values(), key=lambda r: (r.rule, sorted(r.scope.items())))


@contextlib.asynccontextmanager
async def shadow_engine(live: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    """An engine on ``live``'s database whose writes to :data:`SHADOWED` go to a fresh scratch
    schema (module docstring); the schema is dropped on exit."""
    schema = f"backtest_{uuid.uuid4().hex[:12]}"
    async with live.begin() as conn:
        home = str((await conn.execute(text("SELECT current_schema()"))).scalar_one())
        await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        for table in SHADOWED:
            await _shadow_table(conn, home, schema, table)
    url = live.url.render_as_string(hide_password=False)
    engine = create_async_engine(
        url, pool_size=2, connect_args={"server_settings": {"search_path": f"{schema},{home}"}}
    )
    try:
        yield engine
    finally:
        await engine.dispose()
        async with live.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


async def _shadow_table(conn: Any, home: str, schema: str, table: str) -> None:
    src, dst = f'"{home}"."{table}"', f'"{schema}"."{table}"'
    await conn.execute(
        text(f"CREATE TABLE {dst} (LIKE {src} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    )
    keys = await conn.execute(
        text(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = CAST(:t AS regclass) AND contype IN ('p', 'u') ORDER BY conname"
        ),
        {"t": src},
    )
    for name, definition in keys.all():
        await conn.execute(text(f'ALTER TABLE {dst} ADD CONSTRAINT "{name}" {definition}'))
    serials = await conn.execute(
        text(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = :s"
            " AND table_name = :t AND column_default LIKE 'nextval(%'"
        ),
        {"s": schema, "t": table},
    )
    for (column,) in serials.all():
        seq = f'"{schema}"."{table}_{column}_seq"'
        await conn.execute(text(f'CREATE SEQUENCE {seq} OWNED BY {dst}."{column}"'))
        await conn.execute(
            text(f"ALTER TABLE {dst} ALTER COLUMN \"{column}\" SET DEFAULT nextval('{seq}')")
        )


@dataclass(frozen=True)
class DriftJob:
    """The worker's drift-check settings (``monitor.config.Settings.drift_*``)."""

    every: timedelta = timedelta(minutes=5)
    recent: timedelta = timedelta(hours=1)
    reference: timedelta = DEFAULT_REFERENCE
    alpha: float = 0.001
    min_samples: int = 100
    min_reference: float = MIN_REFERENCE


async def backtest(
    live: AsyncEngine,
    rules: RuleSet,
    start: datetime,
    end: datetime,
    step: timedelta,
    drift: DriftJob = DriftJob(),
) -> tuple[list[Step], dict[str, tuple[str, dict[str, str]]], list[Incident]]:
    """Walk ``[start, end]`` (module docstring): drift rounds at ``start`` and every
    ``drift.every``, an evaluation at every ``step``. Returns the steps, per fingerprint seen
    its rule and scope, and the incidents as stored at the end. Raises ValueError for a
    non-positive step or ``end < start``."""
    if step <= timedelta(0) or drift.every <= timedelta(0) or end < start:
        raise ValueError("need step > 0, a drift interval > 0 and end >= start")
    steps: list[Step] = []
    async with shadow_engine(live) as eng:
        next_drift = start
        at = start
        while at <= end:
            while next_drift <= at:
                await drift_once(
                    eng,
                    FixedClock(next_drift),
                    drift.recent,
                    drift.alpha,
                    drift.min_samples,
                    drift.reference,
                    drift.min_reference,
                )
                next_drift += drift.every
            report = await evaluate_once(eng, rules, at, [SINK], exemplars=0)
            steps.append(Step(at, tuple(report.notifications), frozenset(report.firing)))
            at += step
        async with eng.connect() as conn:
            sql = text("SELECT fingerprint, rule, scope FROM alert_states")
            found: list[Any] = list((await conn.execute(sql)).all())
            identities = {
                str(fp): (str(r), {str(k): str(v) for k, v in (sc or {}).items()})
                for fp, r, sc in found
            }
            stored: list[Any] = list(
                (await conn.execute(text("SELECT state FROM alert_incidents"))).scalars()
            )
            incidents = [Incident.from_dict(state) for state in stored]
    return steps, identities, incidents
