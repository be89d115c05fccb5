"""What the gate holds in memory, and its refresh from the store (I/O edge).

A request never reads the database: :class:`GateState` holds the policy (read once, at start),
the inline checks (the domain plugins, loaded once), the LLM judge of rules with the inline
``llm`` check, the latest isotonic map of every agent x domain and the advisor's thresholds
(:mod:`monitor.gate.advised`). :meth:`GateState.refresh` reloads the maps in one query, and
recomputes the advisor's cuts when a map changed or ``advisor_refresh_s`` passed; the gate process
calls it at start and every ``gate_refresh_s`` seconds. :meth:`GateState.check_new_map` is the
cheap version check (``max(id)`` of ``calibration_maps``, an index lookup) the gate process runs
every :data:`MAP_CHECK_S` seconds while the gate is in use (asked within
:data:`MAP_CHECK_IDLE_S`; :meth:`GateState.asked`): a newly fitted map (``monitor calibration
fit``, another process) triggers the refresh at once instead of waiting for the period. A gate
process nobody asks only refreshes every ``gate_refresh_s``; its first answers after such a
pause may use the previous map for up to :data:`MAP_CHECK_S`.
When the store is down the gate keeps answering from what it holds, and says so
(``maps_stale`` in the answer, with the time of the last successful load).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.recalibration import IsotonicMap
from monitor.config import Settings
from monitor.core.errors import ConfigError
from monitor.core.resilience import RetryPolicy
from monitor.gate.advised import AdvisorCuts, ConfidenceGroup, FloatArray, compute_cuts
from monitor.gate.checks import CheckSet
from monitor.gate.decide import MapEntry, Maps, lookup_map
from monitor.gate.inline_llm import LlmJudgeFn
from monitor.gate.policy import DEFAULT_POLICY, GatePolicy, load_policy
from monitor.judges.domains import load_domains
from monitor.judges.llm import LLMJudge, LLMJudgeConfig

log = logging.getLogger("monitor.gate.state")
#: seconds between two checks for a newly fitted map (one index lookup each)
MAP_CHECK_S = 1.0
#: the version check pauses when nobody asked the gate for this long (seconds)
MAP_CHECK_IDLE_S = 600.0
_MAP_MARK = text("SELECT coalesce(max(id), 0) FROM calibration_maps")
#: the advisor's input, grouped by minimum confidence (monitor.gate.advised.ConfidenceGroup)
_ADVISOR_GROUPS = text(
    "SELECT agent_id, coalesce(domain, ''), coalesce(tier, 0), min_confidence, count(*),"
    " sum(sample_weight),"
    " coalesce(sum(sample_weight) FILTER (WHERE outcome_success IS NOT NULL), 0),"
    " coalesce(sum(sample_weight) FILTER (WHERE outcome_success = false), 0)"
    " FROM conversations WHERE sample_weight > 0 AND min_confidence IS NOT NULL"
    " AND first_ts >= :lo AND first_ts < :hi GROUP BY 1, 2, 3, 4"
)

_LATEST_MAPS = text(
    "SELECT DISTINCT ON (agent_id, domain) agent_id, domain, version, map"
    " FROM calibration_maps ORDER BY agent_id, domain, version DESC"
)


def load_gate_policy(path: Path | None) -> GatePolicy:
    """The policy in ``path`` (YAML), or :data:`DEFAULT_POLICY` when unset.

    Raises ConfigError naming the file (and line and field) when unreadable or invalid."""
    if path is None:
        return DEFAULT_POLICY
    try:
        content = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the gate policy: {exc.strerror}") from None
    return load_policy(content, str(path))


def gate_llm_judge(settings: Settings, policy: GatePolicy) -> LLMJudge | None:
    """The LLM judge of the rules listing ``llm`` (None when no rule does): the
    ``llm_judge_*`` endpoint, one attempt (no retries inside a gate answer), the longest
    rule's ``llm_timeout_ms`` per attempt (each answer also bounds it by its own rule's).
    Raises ConfigError when a rule lists ``llm`` and ``llm_judge_base_url`` is unset."""
    budgets = [r.llm_timeout_ms for r in policy.rules if r.uses_llm]
    if not budgets:
        return None
    if not settings.llm_judge_base_url:
        raise ConfigError(
            f"{policy.source}: a gate rule lists the 'llm' check but "
            "MONITOR_LLM_JUDGE_BASE_URL is unset"
        )
    return LLMJudge(
        LLMJudgeConfig(
            base_url=settings.llm_judge_base_url,
            model=settings.llm_judge_model,
            api_key=settings.llm_judge_api_key,
            timeout=max(budgets) / 1000.0,
            json_mode=settings.llm_judge_json_mode,
            retry=RetryPolicy(max_attempts=1),
            name="llm",
        )
    )


async def load_maps(engine: AsyncEngine) -> dict[tuple[str, str], MapEntry]:
    """The latest stored map of every (agent, domain); a map that no longer validates is
    skipped with a warning (the gate then answers uncalibrated for it)."""
    return (await _load_marked_maps(engine))[0]


async def _load_marked_maps(engine: AsyncEngine) -> tuple[dict[tuple[str, str], MapEntry], int]:
    """The maps and the ``max(id)`` read before them (a map added in between is reloaded at
    the next check)."""
    async with engine.connect() as conn:
        mark = int((await conn.execute(_MAP_MARK)).scalar_one())
        rows: list[Any] = list((await conn.execute(_LATEST_MAPS)).all())
    out: dict[tuple[str, str], MapEntry] = {}
    for agent_id, domain, version, data in rows:
        try:
            out[(agent_id, domain)] = MapEntry(IsotonicMap.from_dict(data), int(version))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("calibration map %s/%s v%s unusable: %s", agent_id, domain, version, exc)
    return out, mark


async def advisor_cuts(
    engine: AsyncEngine, policy: GatePolicy, maps: Maps, now: datetime
) -> AdvisorCuts:
    """The advisor's cut of every advisor rule x agent x domain (one grouped query per
    distinct ``window_days``; the confidences through ``maps`` as the gate applies them).
    The computation runs in a thread so a large window does not hold up the event loop."""

    def calibrate(agent_id: str, domain: str | None, conf: FloatArray) -> FloatArray:
        entry = lookup_map(maps, agent_id, domain)
        return conf if entry is None else entry.map.apply(conf)

    windows = sorted({r.advisor.window_days for r in policy.rules if r.advisor is not None})
    cuts: dict[tuple[int, str, str], Any] = {}
    for days in windows:
        params = {"lo": now - timedelta(days=days), "hi": now}
        async with engine.connect() as conn:
            rows: list[Any] = list((await conn.execute(_ADVISOR_GROUPS, params)).all())
        computed = await asyncio.to_thread(_cuts_of_rows, policy, rows, calibrate, now, days)
        cuts.update(computed.cuts)
    return AdvisorCuts(now, cuts)


def _cuts_of_rows(
    policy: GatePolicy,
    rows: list[Any],
    calibrate: Callable[[str, str | None, FloatArray], FloatArray],
    now: datetime,
    days: float,
) -> AdvisorCuts:
    groups = [
        ConfidenceGroup(a, d, int(t), float(c), int(n), float(w), float(k), float(f))
        for a, d, t, c, n, w, k, f in rows
    ]
    return compute_cuts(policy, groups, calibrate, now, days)


class GateState:
    """The policy, checks and maps one gate process answers from."""

    def __init__(
        self,
        policy: GatePolicy,
        checks: CheckSet,
        maps: Maps | None = None,
        llm_judge: LlmJudgeFn | None = None,
        owned: LLMJudge | None = None,
    ) -> None:
        self.policy = policy
        self.checks = checks
        self.maps: Maps = dict(maps or {})
        self.llm_judge = llm_judge  # the inline ``llm`` check (None: no rule uses it)
        self._owned = owned  # the judge behind ``llm_judge`` when this state made it
        self.cuts = AdvisorCuts()
        self.loaded_at: datetime | None = None
        self._loaded_text: tuple[datetime | None, str | None] = (None, None)
        self.last_error: str | None = None
        self.map_mark: int | None = None  # max(calibration_maps.id) when the maps were read
        self._uses_advisor = any(r.advisor is not None for r in policy.rules)
        self._refreshing = asyncio.Lock()  # the periodic refresh and the version check
        self.last_asked: float | None = None  # monotonic seconds of the latest request

    def asked(self, at: float) -> None:
        """Note a request at monotonic time ``at`` (keeps the version check running)."""
        self.last_asked = at

    def in_use(self, at: float) -> bool:
        """True when the gate was asked within :data:`MAP_CHECK_IDLE_S` before ``at``."""
        return self.last_asked is not None and at - self.last_asked < MAP_CHECK_IDLE_S

    @classmethod
    def from_settings(cls, settings: Settings) -> GateState:
        """Policy from ``gate_policy_file``, domains from the plugins and ``domains_dir``, the
        LLM judge when a rule lists ``llm``. Raises ConfigError for an invalid policy or
        domains directory, or ``llm`` without an endpoint (the process stops)."""
        policy = load_gate_policy(settings.gate_policy_file)
        judge = gate_llm_judge(settings, policy)
        return cls(
            policy,
            CheckSet(load_domains(settings.domains_dir)),
            None,
            None if judge is None else judge.judge,
            judge,
        )

    async def aclose(self) -> None:
        """Close the HTTP clients of the LLM judge this state made (the gate process, at stop)."""
        if self._owned is not None:
            await self._owned.aclose()

    async def refresh(self, engine: AsyncEngine, now: datetime) -> bool:
        """Reload the maps, and the advisor's cuts when a map changed or they are older
        than ``advisor_refresh_s``; on a store error keep what is held, remember the error,
        return False (never raises for an unavailable store). One refresh at a time."""
        async with self._refreshing:
            return await self._refresh(engine, now)

    async def _refresh(self, engine: AsyncEngine, now: datetime) -> bool:
        try:
            maps, mark = await _load_marked_maps(engine)
            changed = mark != self.map_mark
            age = None if self.cuts.at is None else (now - self.cuts.at).total_seconds()
            if self._uses_advisor and (
                changed or age is None or age >= self.policy.advisor_refresh_s
            ):
                self.cuts = await advisor_cuts(engine, self.policy, maps, now)
        except Exception as exc:  # the store is down or refusing: keep answering from memory
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("gate: calibration maps not refreshed: %s", self.last_error)
            return False
        self.maps, self.map_mark = maps, mark
        self.loaded_at, self.last_error = now, None
        return True

    async def check_new_map(
        self, engine: AsyncEngine, now: datetime, at: float | None = None
    ) -> bool:
        """The cheap version check: when a map was stored since the last load, refresh now.
        True when it refreshed; False when nothing changed, the store is unavailable, or (given
        the monotonic time ``at``) the gate is not in use (:meth:`in_use`): no query then."""
        if at is not None and not self.in_use(at):
            return False
        try:
            async with engine.connect() as conn:
                mark = int((await conn.execute(_MAP_MARK)).scalar_one())
        except Exception as exc:  # the periodic refresh reports the outage
            log.debug("gate: map version check failed: %s", exc)
            return False
        if mark == self.map_mark:
            return False
        return await self.refresh(engine, now)

    def status(self) -> dict[str, Any]:
        """Where the maps stand, for the answer: ``maps_loaded_at`` and, after a failed
        refresh, ``maps_stale`` with the error."""
        loaded = self.loaded_at
        if self._loaded_text[0] is not loaded:  # the text of each load is made once
            self._loaded_text = (loaded, loaded.isoformat() if loaded else None)
        out: dict[str, Any] = {"maps_loaded_at": self._loaded_text[1]}
        if self.last_error is not None:
            out["maps_stale"] = self.last_error
        return out
