"""Sinks against real local servers: Slack Web API and incoming webhook, a signed webhook
receiver, a real prometheus-alertmanager; the Block Kit rendering; ``monitor alerts test``."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from monitor.alerts.grouping import GroupedNotification
from monitor.alerts.incidents import IncidentPolicy
from monitor.alerts.incidents import step as incident_step
from monitor.alerts.sinks.alertmanager import AlertmanagerSink
from monitor.alerts.sinks.base import DeliveryContext
from monitor.alerts.sinks.slack import SlackSink, SlackWebhookSink
from monitor.alerts.sinks.slack_blocks import dashboard_link, render_message, scrub_payload
from monitor.alerts.sinks.webhook import WebhookSink
from monitor.cli.alerts_send import add_test_command
from tests.servers.alert_servers import (
    Hold,
    SlackError,
    SlackServer,
    Status,
    WebhookReceiver,
    free_port,
    notification,
)

DASH = "http://grafana.example:3000/"
SECRET = "whsec-test-0123456789"
AM_BIN = Path("/usr/bin/prometheus-alertmanager")
T_AM = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def ctx(key: str, thread: dict[str, str] | None = None) -> DeliveryContext:
    return DeliveryContext(key, 1, datetime.now(UTC), thread)


def texts(message: dict[str, object]) -> str:
    return json.dumps(message, ensure_ascii=False)


# --- Block Kit (pure) ---------------------------------------------------------------------


def test_block_kit_message_has_everything_on_call_needs() -> None:
    n = notification(summary="ECE 0.12 on billing, ask jane@example.com, token=abc123")
    msg = render_message(n.to_dict(), DASH)
    blocks = msg["blocks"]
    assert blocks[0]["type"] == "header"
    assert blocks[0]["text"]["text"] == ":rotating_light: [FIRING] ece-tier3"
    fields = {f["text"].split("\n")[0]: f["text"].split("\n")[1] for f in blocks[2]["fields"]}
    assert fields["*Severity*"] == "critical"
    assert fields["*Scope*"] == "agent=billing, domain=refunds, tier=3"
    assert fields["*Value*"] == "0.1234 (&gt; 0.05)"
    assert fields["*Samples*"] == "250" and fields["*Window*"] == "1h"
    buttons = {e["text"]["text"]: e["url"] for e in blocks[-2]["elements"]}
    assert buttons == {
        "Dashboard": "http://grafana.example:3000/d/monitor-calibration"
        "?var-agent=billing&var-domain=refunds&var-tier=3",
        "Runbook": "https://runbooks.example.com/ece",
    }
    assert msg["attachments"] == [{"color": "#E01E5A", "fallback": msg["text"]}]
    assert msg["text"].startswith("[FIRING] critical ece-tier3 (agent=billing, domain=refunds")
    dumped = texts(msg)
    assert "jane@example.com" not in dumped and "[email]" in dumped
    assert "abc123" not in dumped and "token=[secret]" in dumped


def test_opt_in_keeps_customer_content_but_never_secrets() -> None:
    n = notification(summary="customer jane@example.com pasted xoxb-1234567890-abcdefghij")
    msg = render_message({**n.to_dict(), "redact_customer_content": False}, DASH)
    dumped = texts(msg)
    assert "jane@example.com" in dumped
    assert "xoxb-1234567890" not in dumped and "[secret]" in dumped
    scrubbed = scrub_payload({**n.to_dict(), "redact_customer_content": False})
    assert scrubbed["summary"] == "customer jane@example.com pasted [secret]"
    assert scrub_payload(n.to_dict())["summary"] == "customer [email] pasted [secret]"


def test_resolved_and_grouped_variants() -> None:
    resolved = notification(kind="resolved")
    msg = render_message(resolved.to_dict(), DASH)
    assert msg["blocks"][0]["text"]["text"] == ":white_check_mark: [RESOLVED] ece-tier3"
    assert msg["attachments"][0]["color"] == "#2EB67D"
    fields = [f["text"] for f in msg["blocks"][2]["fields"]]
    assert "*Resolved after*\n42m00s" in fields
    assert "*Last value*\n0.1234 (fires when &gt; 0.05)" in fields
    firing_b = notification(rule="drift-psi", agent="support", severity="warning")
    group = GroupedNotification(
        "group:abc",
        "severity=critical",
        {"severity": "critical"},
        (firing_b, resolved),
        datetime.now(UTC),
    )
    gmsg = render_message(group.to_dict(), DASH)
    assert gmsg["blocks"][0]["text"]["text"] == ":warning: 1 firing, 1 resolved · warning"
    members = [b["text"]["text"] for b in gmsg["blocks"] if b["type"] == "section"]
    assert len(members) == 2
    assert "*FIRING* drift-psi" in members[0] and "*RESOLVED* ece-tier3" in members[1]
    assert f"<{dashboard_link(DASH, firing_b.scope)}|Dashboard>" in members[0]
    assert gmsg["text"].splitlines()[0] == "1 firing, 1 resolved (severity=critical)"


# --- Slack --------------------------------------------------------------------------------


@pytest.fixture
async def slack() -> AsyncIterator[SlackServer]:
    server = SlackServer()
    async with server:
        yield server


def slack_sink(server: SlackServer, token: str | None = None) -> SlackSink:
    return SlackSink(
        token or server.token, server.channel, DASH, base_url=f"{server.base_url}/api/"
    )


async def test_slack_posts_blocks_and_threads_the_resolved_message(slack: SlackServer) -> None:
    sink = slack_sink(slack)
    firing, resolved = notification(), notification(kind="resolved")
    first = await sink.deliver(firing.to_dict(), ctx(firing.idempotency_key))
    assert first.ok and first.status == 200
    assert first.response == {"channel": "C0ALERTS", "ts": "1700000001.000100"}
    second = await sink.deliver(resolved.to_dict(), ctx(resolved.idempotency_key, first.response))
    assert second.ok and second.response["thread_ts"] == "1700000001.000100"
    assert [p.token for p in slack.posts] == [slack.token, slack.token]
    posted = slack.messages
    assert "thread_ts" not in posted[0] or posted[0]["thread_ts"] is None
    assert posted[1]["thread_ts"] == "1700000001.000100" and posted[1]["reply_broadcast"] is True
    assert posted[0]["blocks"][0]["text"]["text"] == ":rotating_light: [FIRING] ece-tier3"
    assert posted[1]["blocks"][0]["text"]["text"] == ":white_check_mark: [RESOLVED] ece-tier3"


async def test_slack_errors_are_classified(slack: SlackServer) -> None:
    n = notification().to_dict()
    slack.push(
        Status(500, "<html>oops</html>"),
        SlackError("ratelimited", status=429, retry_after="7"),
        SlackError("ratelimited", status=200, retry_after="3"),
        SlackError("internal_error"),
    )
    results = [await slack_sink(slack).deliver(n, ctx("k")) for _ in range(4)]
    assert [(r.outcome, r.status, r.retry_after) for r in results] == [
        ("retry", 500, None),
        ("retry", 429, 7.0),
        ("retry", 200, 3.0),
        ("retry", 200, None),
    ]
    assert results[1].error == "slack answered HTTP 429: ratelimited"
    bad_token = "xoxb-wrong-token-987654321"
    refused = await slack_sink(slack, token=bad_token).deliver(n, ctx("k"))
    assert (refused.outcome, refused.error) == (
        "permanent",
        "slack answered HTTP 200: invalid_auth",
    )
    wrong = SlackSink(slack.token, "C0NOWHERE", DASH, base_url=f"{slack.base_url}/api/")
    lost = await wrong.deliver(n, ctx("k"))
    assert (lost.outcome, lost.error) == ("permanent", "slack answered HTTP 200: channel_not_found")
    await slack.stop()
    down = await slack_sink(slack).deliver(n, ctx("k"))
    assert down.outcome == "retry" and "connection failed" in (down.error or "")
    assert all(bad_token not in (r.error or "") for r in [*results, refused, lost, down])


async def test_slack_incoming_webhook(slack: SlackServer) -> None:
    url = f"{slack.base_url}/services/T000/B000/sekrit-path-42"
    sink = SlackWebhookSink(url, DASH)
    n = notification()
    ok = await sink.deliver(n.to_dict(), ctx(n.idempotency_key))
    assert ok.ok and slack.messages[-1]["blocks"][0]["type"] == "header"
    slack.push(Status(404, "no_service"), Status(429, "rate_limited", {"Retry-After": "5"}))
    gone = await sink.deliver(n.to_dict(), ctx(n.idempotency_key))
    limited = await sink.deliver(n.to_dict(), ctx(n.idempotency_key))
    assert (gone.outcome, gone.error) == (
        "permanent",
        "slack webhook answered HTTP 404: no_service",
    )
    assert (limited.outcome, limited.retry_after) == ("retry", 5.0)
    assert all("sekrit" not in (r.error or "") for r in (gone, limited))


# --- generic webhook ----------------------------------------------------------------------


async def test_webhook_is_signed_keyed_and_deduplicated_by_the_receiver() -> None:
    async with WebhookReceiver(SECRET) as receiver:
        assert isinstance(receiver, WebhookReceiver)
        sink = WebhookSink(receiver.url, SECRET)
        n = notification(summary="call +44 20 7946 0958 about it")
        results = [await sink.deliver(n.to_dict(), ctx(n.idempotency_key)) for _ in range(2)]
        assert [r.outcome for r in results] == ["delivered", "delivered"]
        assert results[0].response == {
            "status": 200,
            "body": {"accepted": True, "key": n.idempotency_key},
        }
        assert [(r.key, r.duplicate) for r in receiver.received] == [
            (n.idempotency_key, False),
            (n.idempotency_key, True),
        ]
        assert receiver.received[0].body == scrub_payload(n.to_dict())
        assert receiver.received[0].body["summary"] == "call [phone] about it"
        forged = await WebhookSink(receiver.url, "another-secret").deliver(n.to_dict(), ctx("x"))
        assert (forged.outcome, forged.status) == ("permanent", 401)
        assert receiver.rejected == ["mismatch"]
        receiver.push(Status(503, "busy", {"Retry-After": "11"}))
        busy = await sink.deliver(n.to_dict(), ctx(n.idempotency_key))
        assert (busy.outcome, busy.status, busy.retry_after) == ("retry", 503, 11.0)
        release = asyncio.Event()
        receiver.push(Hold(release))
        slow = await WebhookSink(receiver.url, SECRET, timeout_s=0.3).deliver(n.to_dict(), ctx("y"))
        release.set()
        assert slow.outcome == "retry" and "timed out" in (slow.error or "")
        await sink.aclose()


# --- Alertmanager -------------------------------------------------------------------------


@pytest.fixture
async def alertmanager(tmp_path: Path) -> AsyncIterator[str]:
    if not AM_BIN.exists():
        pytest.skip(f"{AM_BIN} missing: apt-get install prometheus-alertmanager (see .ci/run)")
    config = tmp_path / "alertmanager.yml"
    # grouped by the incident label, as docs/runbooks.md tells Alertmanager users to do
    config.write_text(
        'route:\n  receiver: "null"\n  group_by: [incident]\nreceivers:\n  - name: "null"\n'
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            str(AM_BIN),
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "am.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(100):
                try:
                    if (await client.get(f"{url}/-/ready")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise AssertionError((tmp_path / "am.log").read_text())
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


async def test_alertmanager_receives_and_shows_the_alerts(alertmanager: str) -> None:
    sink = AlertmanagerSink(alertmanager, DASH)
    firing, other = notification(), notification(rule="drift-psi", agent="support")
    group = GroupedNotification("group:x", "g", {}, (firing, other), datetime.now(UTC))
    result = await sink.deliver(group.to_dict(), ctx(group.idempotency_key))
    assert (result.outcome, result.status) == ("delivered", 200)
    async with httpx.AsyncClient() as client:
        shown = (await client.get(f"{alertmanager}/api/v2/alerts")).json()
        assert sorted(a["labels"]["alertname"] for a in shown) == ["drift-psi", "ece-tier3"]
        ece = next(a for a in shown if a["labels"]["alertname"] == "ece-tier3")
        assert ece["labels"] == {
            "agent": "billing",
            "alertname": "ece-tier3",
            "domain": "refunds",
            "metric": "ece",
            "severity": "critical",
            "team": "cx",
            "tier": "3",
        }
        assert ece["annotations"] == {
            "summary": "ECE above 0.05 on billing",
            "description": "Calibration of billing degraded.",
            "runbook_url": "https://runbooks.example.com/ece",
            "value": "0.1234 (> 0.05)",
        }
        assert ece["status"]["state"] == "active"
        assert ece["startsAt"] == "2026-03-01T12:00:00.000Z"
        assert ece["generatorURL"] == dashboard_link(DASH, firing.scope)
        resolved = notification(kind="resolved")
        assert (await sink.deliver(resolved.to_dict(), ctx(resolved.idempotency_key))).ok
        shown = (await client.get(f"{alertmanager}/api/v2/alerts")).json()
        assert [a["labels"]["alertname"] for a in shown] == ["drift-psi"]
        bad = await AlertmanagerSink(alertmanager + "/nope", DASH).deliver(
            firing.to_dict(), ctx("k")
        )
        assert bad.outcome == "permanent" and bad.status == 404
    await sink.aclose()


async def test_alertmanager_groups_an_incident_into_one_notification(alertmanager: str) -> None:
    policy = IncidentPolicy(("agent",), timedelta(minutes=30))
    ece = notification(fired_at=datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    drift = notification(rule="drift-tier3", fired_at=datetime(2026, 3, 1, 12, 20, tzinfo=UTC))
    other = notification(agent="support", fired_at=ece.fired_at)
    first = incident_step([], [ece, other], {ece.fingerprint, other.fingerprint}, policy, T_AM)
    firing = {ece.fingerprint, drift.fingerprint, other.fingerprint}
    later = incident_step(
        first.incidents.values(), [drift], firing, policy, T_AM + timedelta(minutes=20)
    )
    notes = [*first.notifications, *later.notifications]
    billing = notes[0].incident_id
    assert billing is not None and notes[2].incident_id == billing != notes[1].incident_id
    sink = AlertmanagerSink(alertmanager, DASH)
    for n in notes:
        assert (await sink.deliver(n.to_dict(), ctx(n.idempotency_key))).ok
    async with httpx.AsyncClient() as client:
        shown = (await client.get(f"{alertmanager}/api/v2/alerts")).json()
        assert sorted((a["labels"]["alertname"], a["labels"]["incident"]) for a in shown) == sorted(
            (n.rule, n.incident_id) for n in notes
        )
        groups = (await client.get(f"{alertmanager}/api/v2/alerts/groups")).json()
    by_incident = {
        g["labels"]["incident"]: sorted(a["labels"]["alertname"] for a in g["alerts"])
        for g in groups
    }
    # Alertmanager's own grouping: one group (one notification) per incident
    assert by_incident == {
        billing: ["drift-tier3", "ece-tier3"],
        notes[1].incident_id: ["ece-tier3"],
    }
    await sink.aclose()


# --- monitor alerts test ------------------------------------------------------------------

ALERT_ENV = (
    "SLACK_BOT_TOKEN",
    "SLACK_CHANNEL",
    "SLACK_WEBHOOK_URL",
    "SLACK_API_URL",
    "WEBHOOK_URL",
    "WEBHOOK_SECRET",
    "ALERTMANAGER_URL",
)


def cli_env(**values: str) -> dict[str, str | None]:
    env: dict[str, str | None] = {f"MONITOR_{k}": None for k in ALERT_ENV}
    env.update({f"MONITOR_{k.upper()}": v for k, v in values.items()})
    return env


async def test_alerts_test_command_reports_each_sink(slack: SlackServer) -> None:
    app = typer.Typer()
    alerts = typer.Typer()
    add_test_command(alerts)
    app.add_typer(alerts, name="alerts")
    runner = CliRunner()

    def run(env: dict[str, str | None]) -> tuple[int, str]:
        result = runner.invoke(app, ["alerts", "test"], env=env)
        return result.exit_code, result.output

    async with WebhookReceiver(SECRET) as receiver:
        assert isinstance(receiver, WebhookReceiver)
        env = cli_env(
            slack_bot_token=slack.token,
            slack_channel=slack.channel,
            slack_api_url=f"{slack.base_url}/api/",
            webhook_url=receiver.url,
            webhook_secret=SECRET,
        )
        code, out = await asyncio.to_thread(run, env)
        assert code == 0, out
        assert "slack" in out and "webhook" in out and out.count("delivered") == 2
        assert "1700000001.000100" in out
        assert len(slack.messages) == 1 and len(receiver.accepted) == 1
        assert receiver.accepted[0].key.startswith("test:")
        code, out = await asyncio.to_thread(run, {**env, "MONITOR_WEBHOOK_SECRET": "wrong"})
        assert code == 1 and "permanent" in out and "401" in out
    code, out = await asyncio.to_thread(run, cli_env())
    assert code == 2 and "no alert sink configured" in out
    code, out = await asyncio.to_thread(run, cli_env(slack_bot_token="xoxb-1"))
    assert code == 2 and "slack_channel" in out


def test_links_open_the_dashboard_of_the_metric_with_the_scope() -> None:
    scope = {"agent": "billing", "tier": "3"}
    assert dashboard_link("http://g/", scope, "drift") == (
        "http://g/d/monitor-drift?var-agent=billing&var-tier=3"
    )
    assert dashboard_link("http://g", scope, "escalation_inversion").startswith(
        "http://g/d/monitor-escalation?"
    )
    assert dashboard_link("http://g", {}, "dlq_rate") == "http://g/d/monitor-pipeline"
    assert dashboard_link("http://g", scope, "ece").startswith("http://g/d/monitor-calibration?")
