"""What the gate holds in memory, and its refresh from the store (I/O edge).

A request never reads the database: :class:`GateState` holds the policy (read once, at start),
the inline checks (the domain plugins, loaded once) and the latest isotonic map of every
agent x domain. :meth:`GateState.refresh` reloads the maps in one query; the worker calls it at
start and every ``gate_refresh_s`` seconds, so a newly fitted map is used within that delay.
When the store is down the gate keeps answering from the maps it holds, and says so
(``maps_stale`` in the answer, with the time of the last successful load).
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.recalibration import IsotonicMap
from monitor.config import Settings
from monitor.core.errors import ConfigError
from monitor.gate.checks import CheckSet
from monitor.gate.decide import MapEntry, Maps
from monitor.gate.policy import DEFAULT_POLICY, GatePolicy, load_policy
from monitor.judges.domains import load_domains

log = logging.getLogger("monitor.gate.state")

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


async def load_maps(engine: AsyncEngine) -> dict[tuple[str, str], MapEntry]:
    """The latest stored map of every (agent, domain); a map that no longer validates is
    skipped with a warning (the gate then answers uncalibrated for it)."""
    async with engine.connect() as conn:
        rows: list[Any] = list((await conn.execute(_LATEST_MAPS)).all())
    out: dict[tuple[str, str], MapEntry] = {}
    for agent_id, domain, version, data in rows:
        try:
            out[(agent_id, domain)] = MapEntry(IsotonicMap.from_dict(data), int(version))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("calibration map %s/%s v%s unusable: %s", agent_id, domain, version, exc)
    return out


class GateState:
    """The policy, checks and maps one worker's gate answers from."""

    def __init__(self, policy: GatePolicy, checks: CheckSet, maps: Maps | None = None) -> None:
        self.policy = policy
        self.checks = checks
        self.maps: Maps = dict(maps or {})
        self.loaded_at: datetime | None = None
        self.last_error: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> GateState:
        """Policy from ``gate_policy_file``, domains from the plugins and ``domains_dir``.
        Raises ConfigError for an invalid policy or domains directory (the worker stops)."""
        return cls(load_gate_policy(settings.gate_policy_file),
                   CheckSet(load_domains(settings.domains_dir)))  # fmt: skip

    async def refresh(self, engine: AsyncEngine, now: datetime) -> bool:
        """Reload the maps; on a store error keep the old ones, remember the error, return
        False (never raises for an unavailable store)."""
        try:
            self.maps = await load_maps(engine)
        except Exception as exc:  # the store is down or refusing: keep answering from memory
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("gate: calibration maps not refreshed: %s", self.last_error)
            return False
        self.loaded_at, self.last_error = now, None
        return True

    def status(self) -> dict[str, Any]:
        """Where the maps stand, for the answer: ``maps_loaded_at`` and, after a failed
        refresh, ``maps_stale`` with the error."""
        out: dict[str, Any] = {
            "maps_loaded_at": self.loaded_at.isoformat() if self.loaded_at else None
        }
        if self.last_error is not None:
            out["maps_stale"] = self.last_error
        return out
