"""``monitor drift-accept``: a deliberate change stops being flagged once accepted, and only for
the segments selected; the pure re-pinning rules."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from monitor.analytics.drift_policy import Reference, accept, accepted_since, reference_window
from monitor.analytics.drift_state import load_references
from monitor.analytics.periodic import drift_once
from monitor.cli import app
from monitor.core.clock import FixedClock
from monitor.store.engine import make_engine
from tests.analytics.test_drift_tracked import (
    CHANGE,
    DRIFTING,
    END,
    RECENT,
    START,
    _events,
    _references,
)
from tests.seeding import seeded_database

T0 = datetime(2026, 6, 1, tzinfo=UTC)
KEY = (DRIFTING, "1.0", "telecom", 3)


def test_accept_repins_the_reference_and_clears_the_flag():
    flagged = Reference(
        T0 - timedelta(days=1), T0, None, T0 + timedelta(hours=2), T0 + timedelta(hours=5)
    )
    since = accepted_since(flagged, timedelta(hours=1))
    assert since == T0 + timedelta(hours=1)
    now = T0 + timedelta(hours=6)
    new = accept(flagged, since, now)
    assert (new.ref_from, new.ref_to, new.clean_since, new.flagged_since) == (
        since,
        now,
        since,
        None,
    )
    assert not new.flagged
    # the next check compares with the accepted stretch, then rolls forward from it
    assert reference_window(new, now - timedelta(minutes=55), timedelta(days=1)) == (since, now)
    later = now + timedelta(hours=1)
    assert reference_window(new, later, timedelta(days=1)) == (since, later)
    # not flagged: no default start; a start after now is refused
    assert accepted_since(new, timedelta(hours=1)) is None
    with pytest.raises(ValueError):
        accept(flagged, now, now)


@pytest.fixture
def seeded(migrated_template_url: str) -> Iterator[str]:
    with seeded_database(migrated_template_url, "mon_da", _events()) as url:
        yield url


def _checks(url: str, start: datetime, end: datetime) -> dict[datetime, Reference | None]:
    async def go() -> dict[datetime, Reference | None]:
        engine = make_engine(url)
        try:
            out: dict[datetime, Reference | None] = {}
            t = start
            while t <= end:
                await drift_once(engine, FixedClock(t), RECENT, 0.001, 100)
                out[t] = (await load_references(engine)).get(KEY)
                t += timedelta(minutes=10)
            return out
        finally:
            await engine.dispose()

    return asyncio.run(go())


def test_an_accepted_change_is_no_longer_flagged(seeded):
    accepted_at = CHANGE + timedelta(minutes=70)
    before = _checks(seeded, START + timedelta(minutes=60), accepted_at)
    assert before[accepted_at] is not None and before[accepted_at].flagged, before
    env = {"MONITOR_DATABASE_URL": seeded}
    args = [
        "drift-accept",
        "--agent",
        "sim-*",
        "--at",
        accepted_at.isoformat(),
        "--recent",
        "40m",
        "--json",
    ]
    dry = CliRunner().invoke(app, [*args, "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    dry_out = json.loads(dry.output)
    # only the flagged segment is re-pinned by default; the stable ones are left alone
    assert [a["agent_id"] for a in dry_out["accepted"]] == [DRIFTING], dry_out
    assert DRIFTING not in {s["agent_id"] for s in dry_out["skipped"]} and dry_out["skipped"]
    refs = asyncio.run(_references(seeded))
    assert refs[KEY].flagged  # a dry run changes nothing
    done = CliRunner().invoke(app, args, env=env)
    assert done.exit_code == 0, done.output
    first_fired = before[accepted_at].flagged_since  # type: ignore[union-attr]
    assert json.loads(done.output)["accepted"][0]["reference_from"] == (
        (first_fired - RECENT).isoformat()
    )  # type: ignore[operator]
    after = _checks(seeded, accepted_at + timedelta(minutes=10), END)
    assert after and all(r is not None and not r.flagged for r in after.values()), after


def test_nothing_to_accept_says_so(seeded):
    out = CliRunner().invoke(
        app, ["drift-accept", "--agent", "nobody"], env={"MONITOR_DATABASE_URL": seeded}
    )
    assert out.exit_code == 1 and "no drift state matches" in out.output
