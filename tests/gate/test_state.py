"""What the gate holds in memory: maps loaded from Postgres, kept when the store goes away."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from monitor.analytics.recalibration import IsotonicMap, fit_isotonic
from monitor.analytics.write import save_map
from monitor.gate.checks import CheckSet
from monitor.gate.decide import MapEntry
from monitor.gate.policy import DEFAULT_POLICY
from monitor.gate.state import GateState
from monitor.stack.ports import free_port
from monitor.store.engine import make_engine

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def test_refresh_loads_the_latest_maps_and_keeps_them_when_the_store_is_down(
    database_url: str,
) -> None:
    rng = np.random.default_rng(5)
    conf = rng.uniform(0.4, 1.0, 500)
    fitted = fit_isotonic(conf, (rng.uniform(size=500) < conf - 0.2).astype(float))
    engine = make_engine(database_url)
    state = GateState(DEFAULT_POLICY, CheckSet())
    try:
        for domain in ("retail", "retail", ""):  # retail twice: version 2 is the latest
            await save_map(engine, "agent-a", domain, fitted, NOW, NOW + timedelta(days=1))
        assert await state.refresh(engine, NOW) is True
    finally:
        await engine.dispose()
    assert set(state.maps) == {("agent-a", "retail"), ("agent-a", "")}
    assert state.maps[("agent-a", "retail")].version == 2
    assert state.maps[("agent-a", "retail")].map == fitted.map
    assert state.status() == {"maps_loaded_at": NOW.isoformat()}

    gone = make_engine(f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere")
    try:  # a real connection refused, not a mock
        assert await state.refresh(gone, NOW + timedelta(minutes=1)) is False
    finally:
        await gone.dispose()
    assert state.maps[("agent-a", "retail")].version == 2  # still answering from memory
    status = state.status()
    assert status["maps_loaded_at"] == NOW.isoformat()
    assert isinstance(status["maps_stale"], str) and len(status["maps_stale"]) > 10


def test_a_state_can_start_with_maps() -> None:
    entry = MapEntry(IsotonicMap.identity(), 1)
    state = GateState(DEFAULT_POLICY, CheckSet(), {("a", ""): entry})
    assert state.maps[("a", "")] is entry and state.status() == {"maps_loaded_at": None}
