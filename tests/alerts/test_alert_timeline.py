"""End to end alerting over the simulator's timeline: events through the ingest writer, drift
checks, the default rules, the outbox and the notifier, delivered to a local Slack server and a
signed local webhook. The drifting agent fires a drift alert after its change point and resolves
by its recovery (the resolution threaded under the firing Slack message); the calibrated agent
never gets a drift alert.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from monitor.alerts.rules import RuleSet, default_rules
from monitor.alerts.sinks.slack import SlackSink
from monitor.sim.traffic import Simulator, default_agents
from monitor.stack.demo_alerts import run_demo_alerts
from monitor.store.engine import libpq_url
from tests.db import fetch
from tests.seeding import seeded_database
from tests.servers.alert_servers import SlackServer

N_CONV = 2400
END = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
START = END - timedelta(seconds=5 * N_CONV)  # 3 h 20 min
CHANGE = START + timedelta(minutes=80)
RECOVERY = START + timedelta(minutes=140)


@pytest.fixture
def seeded(migrated_template_url: str) -> Iterator[str]:
    events = Simulator(11, START, default_agents(CHANGE, RECOVERY)).events(N_CONV)
    with seeded_database(migrated_template_url, "mon_tl", events) as url:
        yield url


async def _alert_rows(url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        history = [dict(r) for r in await conn.fetch("SELECT * FROM alert_history")]
        outbox = [dict(r) for r in await conn.fetch("SELECT * FROM notification_outbox")]
    finally:
        await conn.close()
    return history, outbox


def notifications(message: dict[str, Any]) -> list[dict[str, Any]]:
    return list(message.get("notifications", []))


def quick_drift_rules() -> RuleSet:
    """The default rules with the drift rules resolving at the first quiet check: their 2 h
    ``keep_firing_for`` is longer than what is left of this 3 h 20 min timeline after the
    recovery (docs/analytics.md, hysteresis)."""
    rules = default_rules()
    quick = [
        r.model_copy(update={"keep_firing_for": timedelta(0)}) if r.metric.value == "drift" else r
        for r in rules.rules
    ]
    return rules.model_copy(update={"rules": tuple(quick)})


def test_drift_alert_fires_and_resolves_in_slack_and_webhook(seeded):
    async def go() -> tuple[list[dict[str, Any]], SlackServer]:
        async with SlackServer() as slack:
            sink = SlackSink(
                slack.token,
                slack.channel,
                "http://grafana.local",
                base_url=f"{slack.base_url}/api/",
            )
            messages, ticks = await run_demo_alerts(
                seeded,
                quick_drift_rules(),
                START + timedelta(minutes=40),
                END,
                extra_sinks={"slack": sink},
                clock=lambda: END,  # the traffic ends "now"
                dashboard_url="http://grafana.local",
            )
        assert max(t.at for t in ticks) == END  # the flush tick did not run ahead of the clock
        return messages, slack

    messages, slack = asyncio.run(go())
    # every row's times are consistent and none is in the future of the (injected) wall clock
    history, outbox = asyncio.run(_alert_rows(seeded))
    assert history and outbox
    assert max(r["at"] for r in history) <= END
    assert all(r["created_at"] <= END and r["next_attempt_at"] >= r["created_at"] for r in outbox)
    delivered = [r for r in outbox if r["status"] == "delivered"]
    assert delivered and all(r["delivered_at"] >= r["created_at"] for r in delivered)
    drift = [
        (n["kind"], n["scope"].get("agent"), datetime.fromisoformat(n["created_at"]))
        for m in messages
        for n in notifications(m)
        if n["rule"] == "drift_tier3"
    ]
    drifting = [(k, t) for k, a, t in drift if a == "sim-telecom-drifting"]
    assert [k for k, _ in drifting] == ["firing", "resolved"], drift
    fired_at, resolved_at = drifting[0][1], drifting[1][1]
    assert CHANGE < fired_at <= RECOVERY
    # the reference stays pinned while the change is flagged: the alert resolves only once the
    # recent window is back to it, i.e. about one window after the recovery
    assert RECOVERY < resolved_at <= RECOVERY + timedelta(minutes=45)
    assert not [a for _, a, _ in drift if a == "sim-airline-calibrated"]
    # the same notifications reached Slack: the drifting agent's incident paged once (its first
    # alert, a new message) and the drift alert's firing and resolution are replies in its thread
    texts = [(m.get("text", ""), m.get("thread_ts"), m["ts"]) for m in slack.messages]
    pages = [ts for t, th, ts in texts if th is None and "sim-telecom-drifting" in t]
    assert len(pages) == 1, texts
    in_thread = [t for t, th, _ in texts if th == pages[0] and "drift_tier3" in t]
    assert [t.split("\n")[1].split()[0] for t in in_thread] == ["[FIRING]", "[RESOLVED]"], texts
    # the receiver's firing page names the conversations that show the drift: one step to each
    page = next(
        m
        for m in messages
        for n in notifications(m)
        if n["rule"] == "drift_tier3" and n["kind"] == "firing"
    )
    [n] = [n for n in notifications(page) if n["rule"] == "drift_tier3"]
    shown = page["exemplars"][f"{n['fingerprint']}:{n['fired_at']}"]
    assert len(shown) == 3
    owners = asyncio.run(
        fetch(
            seeded,
            "SELECT DISTINCT agent_id FROM conversations WHERE conversation_id = ANY($1::text[])",
            [x["conversation_id"] for x in shown],
        )
    )
    assert [r["agent_id"] for r in owners] == ["sim-telecom-drifting"]
    for x in shown:
        assert x["command"] == f"monitor conversation {x['conversation_id']}"
        assert x["link"].startswith("http://grafana.local/d/monitor-conversation?var-conversation=")
        assert x["reason"].startswith("bin ")
