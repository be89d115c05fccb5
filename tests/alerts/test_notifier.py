"""The notifier against a real Postgres outbox and real local receivers: threading, retries
with exact delays, Retry-After, permanent errors, a sink down then up (order kept, other sinks
unaffected), concurrent notifiers, and a SIGKILL between sending and recording."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.alerts.grouping import Group, GroupingPolicy
from monitor.alerts.grouping import step as group_step
from monitor.alerts.incidents import Incident, IncidentPolicy
from monitor.alerts.incidents import step as incident_step
from monitor.alerts.notifier import Notifier, enqueue
from monitor.alerts.sinks.base import Sink
from monitor.alerts.sinks.slack import SKIPPED_UPDATE, SlackSink, SlackWebhookSink
from monitor.alerts.sinks.webhook import WebhookSink
from monitor.alerts.states import Notification
from monitor.core.resilience import RetryPolicy
from monitor.store.engine import make_engine
from monitor.store.tables_alerts import notification_outbox as outbox
from tests.servers.alert_servers import (
    SlackError,
    SlackServer,
    Status,
    WebhookReceiver,
    notification,
)

SECRET = "whsec-notifier-test"
DASH = "http://localhost:3000"
T0 = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)


class Clock:
    """A wall clock that only moves when told (or when the notifier sleeps)."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += timedelta(seconds=seconds)
        await asyncio.sleep(0)


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(database_url)
    yield eng
    await eng.dispose()


@pytest.fixture
async def slack() -> AsyncIterator[SlackServer]:
    server = SlackServer()
    async with server:
        yield server


def slack_sink(server: SlackServer) -> SlackSink:
    return SlackSink(server.token, server.channel, DASH, base_url=f"{server.base_url}/api/")


def notifier(engine: AsyncEngine, sinks: dict[str, Sink], clock: Clock, **kw: Any) -> Notifier:
    retry = RetryPolicy(kw.pop("max_attempts", 5), base_delay=1.0, max_delay=60.0)
    return Notifier(engine, sinks, retry, clock=clock, sleep=clock.sleep, rand=lambda: 0.5, **kw)


async def rows(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        result = await conn.execute(select(outbox).order_by(outbox.c.id))
        return [dict(r._mapping) for r in result]


async def test_delivers_threads_resolved_and_enqueue_is_idempotent(
    engine: AsyncEngine, slack: SlackServer
) -> None:
    firing, resolved = notification(), notification(kind="resolved")
    async with WebhookReceiver(SECRET) as receiver:
        assert isinstance(receiver, WebhookReceiver)
        sinks: dict[str, Sink] = {
            "slack": slack_sink(slack),
            "webhook": WebhookSink(receiver.url, SECRET),
        }
        assert await enqueue(engine, [firing, resolved], sinks, now=T0) == 4
        assert await enqueue(engine, [firing.to_dict()], sinks, now=T0) == 0
        clock = Clock()
        assert await notifier(engine, sinks, clock).run_once(T0) == 4
    first, second = slack.messages
    assert second["thread_ts"] == first["ts"] and second["channel"] == slack.channel
    assert [r.key for r in receiver.accepted] == [firing.idempotency_key, resolved.idempotency_key]
    stored = await rows(engine)
    assert [(r["sink"], r["status"], r["attempts"]) for r in stored] == [
        ("slack", "delivered", 1),
        ("webhook", "delivered", 1),
        ("slack", "delivered", 1),
        ("webhook", "delivered", 1),
    ]
    assert stored[0]["response"] == {
        "channel": "C0ALERTS",
        "ts": first["ts"],
        "episodes": [firing.episode],
    }
    assert stored[2]["response"]["thread_ts"] == first["ts"]
    assert all(r["delivered_at"] == T0 for r in stored)


async def test_enqueue_joins_the_callers_transaction(engine: AsyncEngine) -> None:
    n = notification()
    async with engine.connect() as conn:
        trans = await conn.begin()
        assert await enqueue(conn, [n], ["webhook"]) == 1
        await trans.rollback()
    assert await rows(engine) == []
    async with engine.begin() as conn:
        assert await enqueue(conn, [n], ["webhook", "slack"]) == 2
    assert [(r["sink"], r["status"]) for r in await rows(engine)] == [
        ("webhook", "pending"),
        ("slack", "pending"),
    ]


async def test_500s_then_success_with_exact_backoff(
    engine: AsyncEngine, slack: SlackServer
) -> None:
    slack.push(Status(500), Status(502, "bad gateway"))
    clock = Clock()
    n = notifier(engine, {"slack": slack_sink(slack)}, clock)
    await enqueue(engine, [notification()], ["slack"], now=T0)
    assert await n.run_once(T0) == 1
    (row,) = await rows(engine)
    assert (row["status"], row["attempts"], row["last_error"]) == (
        "pending",
        1,
        "slack answered HTTP 500",
    )
    assert row["next_attempt_at"] == T0 + timedelta(seconds=0.5)  # rand 0.5 * 1 s
    assert await n.run_once(T0 + timedelta(seconds=0.4)) == 0  # not due yet
    clock.now = T0 + timedelta(seconds=0.5)
    assert await n.run_once() == 1
    (row,) = await rows(engine)
    assert row["next_attempt_at"] == clock.now + timedelta(seconds=1.0)  # 0.5 * 2 s
    clock.now += timedelta(seconds=1)
    assert await n.run_once() == 1
    (row,) = await rows(engine)
    assert (row["status"], row["attempts"], row["last_error"]) == ("delivered", 3, None)
    assert [p.answered for p in slack.posts] == [500, 502, 200]


async def test_429_retry_after_is_honoured_by_the_run_loop(
    engine: AsyncEngine, slack: SlackServer
) -> None:
    slack.push(SlackError("ratelimited", status=429, retry_after="7"))
    clock = Clock()
    stop = asyncio.Event()
    n = notifier(engine, {"slack": slack_sink(slack)}, clock, poll_interval_s=60.0)

    async def sleep(seconds: float) -> None:
        await clock.sleep(seconds)
        if len(slack.messages) == 1:
            stop.set()

    n._sleep = sleep
    await enqueue(engine, [notification()], ["slack"], now=T0)
    await asyncio.wait_for(n.run(stop), 30)
    assert clock.slept == [7.0, 60.0]
    assert [p.answered for p in slack.posts] == [429, 200]
    (row,) = await rows(engine)
    assert (row["status"], row["attempts"], row["delivered_at"]) == (
        "delivered",
        2,
        T0 + timedelta(seconds=7),
    )


async def test_ratelimited_ok_false_retries_and_invalid_auth_fails_at_once(
    engine: AsyncEngine, slack: SlackServer
) -> None:
    # The two sinks talk to two servers: the notifier sends to both at once, so a scripted
    # reply on a shared server would go to whichever request arrived first.
    slack.push(SlackError("ratelimited", status=200, retry_after="3"))
    clock = Clock()
    revoked = SlackServer()
    async with revoked:
        bad = SlackSink(
            "xoxb-revoked-000000000", revoked.channel, DASH, base_url=f"{revoked.base_url}/api/"
        )
        n = notifier(engine, {"slack": slack_sink(slack), "badslack": bad}, clock)
        await enqueue(engine, [notification()], ["slack", "badslack"], now=T0)
        assert await n.run_once(T0) == 2
    assert [p.token for p in slack.posts] == [slack.token]
    assert [(p.token, p.answered) for p in revoked.posts] == [("xoxb-revoked-000000000", 200)]
    limited, refused = await rows(engine)
    assert (limited["status"], limited["next_attempt_at"]) == ("pending", T0 + timedelta(seconds=3))
    assert limited["last_error"] == "slack answered HTTP 200: ratelimited"
    assert (refused["status"], refused["attempts"]) == ("failed", 1)
    assert refused["last_error"] == (
        "permanent error after 1 attempt(s): slack answered HTTP 200: invalid_auth"
    )
    assert "xoxb" not in refused["last_error"]


async def test_gives_up_after_max_attempts(engine: AsyncEngine, slack: SlackServer) -> None:
    slack.push(Status(500), Status(500), Status(500))
    clock = Clock()
    n = notifier(engine, {"slack": slack_sink(slack)}, clock, max_attempts=3)
    await enqueue(engine, [notification()], ["slack"], now=T0)
    for _ in range(3):
        await n.run_once()
        clock.now += timedelta(seconds=10)
    (row,) = await rows(engine)
    assert (row["status"], row["attempts"]) == ("failed", 3)
    assert row["last_error"] == "gave up after 3 attempt(s): slack answered HTTP 500"
    assert await n.run_once(clock.now + timedelta(hours=1)) == 0


async def test_sink_down_then_up_delivers_everything_in_order(
    engine: AsyncEngine, slack: SlackServer
) -> None:
    receiver = WebhookReceiver(SECRET)  # not started: connection refused
    a = [notification(agent="a"), notification(agent="a", kind="repeat", sequence=1)]
    a.append(notification(agent="a", kind="resolved"))
    b = [notification(agent="b"), notification(agent="b", kind="resolved")]
    order = [a[0], b[0], a[1], b[1], a[2]]
    sinks: dict[str, Sink] = {
        "webhook": WebhookSink(receiver.url, SECRET),
        "slack": slack_sink(slack),
    }
    await enqueue(engine, order, ["webhook", "slack"], now=T0)
    clock = Clock()
    n = notifier(engine, sinks, clock, max_attempts=10)
    attempts = 0
    for _ in range(4):  # down for a while: only the head of each fingerprint is tried
        attempts += await n.run_once()
        clock.now += timedelta(seconds=30)
    assert len(slack.messages) == 5  # Slack was never blocked by the webhook being down
    assert attempts == 5 + 4 * 2
    stored = await rows(engine)
    heads = [r for r in stored if r["sink"] == "webhook" and r["attempts"] > 0]
    assert [r["idempotency_key"] for r in heads] == [a[0].idempotency_key, b[0].idempotency_key]
    assert all(r["attempts"] == 4 and "connection failed" in r["last_error"] for r in heads)
    await receiver.start()
    try:
        await n.run_once()
    finally:
        await receiver.stop()
    assert all(r["status"] == "delivered" for r in await rows(engine))
    got = [r.key for r in receiver.received]
    assert sorted(got) == sorted(x.idempotency_key for x in order) and not receiver.duplicates
    for fp in (a, b):
        keys = [x.idempotency_key for x in fp]
        assert [k for k in got if k in keys] == keys


async def test_concurrent_notifiers_deliver_each_row_once(engine: AsyncEngine) -> None:
    notes = [notification(agent=f"agent-{i}") for i in range(20)]
    await enqueue(engine, notes, ["webhook"], now=T0)
    async with WebhookReceiver(SECRET) as receiver:
        assert isinstance(receiver, WebhookReceiver)
        workers = [
            notifier(engine, {"webhook": WebhookSink(receiver.url, SECRET)}, Clock(), batch_size=3)
            for _ in range(3)
        ]
        counts = await asyncio.gather(*(w.run_once(T0) for w in workers))
    assert sum(counts) == 20
    assert len(receiver.received) == 20 and not receiver.duplicates
    assert {r["status"] for r in await rows(engine)} == {"delivered"}


async def _spawn(
    database_url: str, receiver: WebhookReceiver, log: Path
) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    env["MONITOR_ENV_FILE"] = ""  # no dotenv file either
    env |= {
        "DATABASE_URL": database_url,
        "MONITOR_WEBHOOK_URL": receiver.url,
        "MONITOR_WEBHOOK_SECRET": SECRET,
        "MONITOR_NOTIFY_LEASE_S": "8",
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "monitor.alerts.notifier",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


async def _until(check: Any, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_sigkill_between_sending_and_recording(
    engine: AsyncEngine, database_url: str, tmp_path: Path
) -> None:
    notes = [notification(agent=f"agent-{i}") for i in range(6)]
    await enqueue(engine, notes, ["webhook"])
    release = asyncio.Event()
    receiver = WebhookReceiver(SECRET)
    # the first three are answered and recorded; the other three reach the receiver, which
    # holds its answer while the notifier is killed
    receiver.hold_from(3, release)

    async def delivered() -> int:
        return sum(r["status"] == "delivered" for r in await rows(engine))

    async def all_sent_three_recorded() -> bool:
        return len(receiver.received) == 6 and await delivered() == 3

    async def all_delivered() -> bool:
        return await delivered() == 6

    await receiver.start()
    try:
        first = await _spawn(database_url, receiver, tmp_path / "notifier.log")
        await _until(all_sent_three_recorded)
        first.send_signal(signal.SIGKILL)
        assert await first.wait() == -signal.SIGKILL
        held = {r.key for r in receiver.received[3:]}
        release.set()
        receiver.hold_after = None
        second = await _spawn(database_url, receiver, tmp_path / "notifier.log")
        await _until(all_delivered, 60)
        second.send_signal(signal.SIGTERM)
        assert await second.wait() == 0
    finally:
        await receiver.stop()
    log = (tmp_path / "notifier.log").read_text()
    assert SECRET not in log and "Traceback" not in log
    assert len(receiver.received) == 9
    assert sorted(r.key for r in receiver.accepted) == sorted(n.idempotency_key for n in notes)
    assert {r.key for r in receiver.duplicates} == held and len(receiver.duplicates) == 3
    stored = await rows(engine)
    assert sorted(r["attempts"] for r in stored) == [1, 1, 1, 2, 2, 2]
    assert {r["idempotency_key"] for r in stored if r["attempts"] == 2} == held


def incident_payloads() -> list[dict[str, Any]]:
    """One incident as the evaluator hands it to the outbox, through the real incident and
    grouping steps: a warning opens it (the page), a critical alert joins (the one re-page),
    the critical one resolves (an update), the warning resolves (the close)."""
    policy = IncidentPolicy(("agent",), timedelta(minutes=30), repage=True)
    grouping = GroupingPolicy(("severity", "agent"), timedelta(0), timedelta(seconds=1))
    warn = notification(rule="brier-tier3", severity="warning", fired_at=T0)
    crit = notification(rule="ece-tier3", fired_at=T0 + timedelta(minutes=5))
    crit_done = notification(rule="ece-tier3", kind="resolved", fired_at=crit.fired_at)
    warn_done = Notification.from_dict(
        {
            **notification(rule="brier-tier3", kind="resolved", fired_at=T0).to_dict(),
            "severity": "warning",
        }
    )
    incidents: list[Incident] = []
    groups: dict[str, Group] = {}
    firing: set[str] = set()
    out: list[dict[str, Any]] = []
    steps = ((0, warn, True), (5, crit, True), (50, crit_done, False), (60, warn_done, False))
    for minute, note, on in steps:
        now = T0 + timedelta(minutes=minute)
        (firing.add if on else firing.discard)(note.fingerprint)
        joined = incident_step(incidents, [note], firing, policy, now)
        incidents = list(joined.incidents.values())
        result = group_step(groups, joined.notifications, grouping, now)
        groups = result.groups
        out += [b.to_dict() for b in result.ready]
    return out


async def test_an_incident_is_one_slack_thread_one_webhook_message_and_keyed_json(
    engine: AsyncEngine, slack: SlackServer
) -> None:
    payloads = incident_payloads()
    assert [p["incident_role"] for p in payloads] == ["open", "repage", "update", "close"]
    incident = payloads[0]["incident_id"]
    assert incident.startswith("inc-") and {p["incident_id"] for p in payloads} == {incident}
    hook = SlackWebhookSink(f"{slack.base_url}/services/T0/B0/x", DASH)
    async with WebhookReceiver(SECRET) as receiver:
        assert isinstance(receiver, WebhookReceiver)
        sinks: dict[str, Sink] = {
            "slack": slack_sink(slack),
            "slack_webhook": hook,
            "webhook": WebhookSink(receiver.url, SECRET),
        }
        assert await enqueue(engine, payloads, sinks, now=T0) == 12
        assert await notifier(engine, sinks, Clock()).run_once(T0) == 12
    bot = [m for m in slack.messages if "channel" in m]
    posted = [m for m in slack.messages if "channel" not in m]
    # the bot: one thread; updates quiet in it, the re-page and the close also in the channel
    root = bot[0]
    assert root.get("thread_ts") is None
    assert [m.get("thread_ts") for m in bot[1:]] == [root["ts"]] * 3
    assert [m.get("reply_broadcast") for m in bot[1:]] == [True, None, True]
    assert f"New incident `{incident}`" in json.dumps(root["blocks"])
    assert f"`monitor alerts show {incident}`" in json.dumps(root["blocks"])
    assert f"Incident `{incident}` resolved" in json.dumps(bot[3]["blocks"])
    # the incoming webhook cannot thread: the pages only (the opening one and the re-page)
    assert [m["blocks"][0]["text"]["text"] for m in posted] == [
        ":warning: 1 firing, 0 resolved · warning",
        ":rotating_light: 1 firing, 0 resolved · critical",
    ]
    # the signed webhook: every message, each naming the incident and what it is to it
    bodies = [r.body for r in receiver.accepted]
    assert [(b["incident_id"], b["incident_role"]) for b in bodies] == [
        (incident, "open"),
        (incident, "repage"),
        (incident, "update"),
        (incident, "close"),
    ]
    assert all(b["labels"]["incident"] == incident for b in bodies)
    assert all(n["incident_id"] == incident for b in bodies for n in b["notifications"])
    stored = await rows(engine)
    assert all(r["status"] == "delivered" for r in stored)
    first_slack = next(r for r in stored if r["sink"] == "slack")
    assert first_slack["response"]["incident"] == incident
    skipped = [r["response"] for r in stored if r["sink"] == "slack_webhook"][2:]
    assert skipped == [{"skipped": SKIPPED_UPDATE}] * 2
