"""What leaves the process for an alert: sinks isolated from each other, every byte redacted.

Real HTTP receivers on loopback and a real Postgres outbox. One receiver captures each request
whole (method, path with query, headers, body) so the test can inspect every outgoing byte.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote_plus

import pytest
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.alerts.grouping import GroupedNotification
from monitor.alerts.notifier import Notifier, default_retry, enqueue
from monitor.alerts.sinks.alertmanager import AlertmanagerSink
from monitor.alerts.sinks.base import Sink
from monitor.alerts.sinks.slack import SlackSink, SlackWebhookSink
from monitor.alerts.sinks.webhook import WebhookSink
from monitor.alerts.states import Notification
from monitor.store.engine import make_engine
from tests.servers.alert_servers import (
    Hold,
    LocalServer,
    SlackServer,
    WebhookReceiver,
    notification,
)

SECRET = "whsec-egress"
DASH = "http://grafana.local:3000"
EMAIL, PHONE, CARD = "jane.doe@example.com", "+44 20 7946 0958", "4111 1111 1111 1111"
MENTION = "<!channel>"


class Capture(LocalServer):
    """Answers every POST like Slack/webhooks/Alertmanager would and keeps the raw request."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[bytes] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{path:.*}", self._any)
        return app

    async def _any(self, request: web.Request) -> web.Response:
        head = f"{request.method} {request.path_qs}\n" + "".join(
            f"{k}: {v}\n" for k, v in request.headers.items()
        )
        self.requests.append(head.encode() + b"\n" + await request.read())
        if request.path.startswith("/services/"):
            return web.Response(text="ok")
        return web.json_response({"ok": True, "channel": "C1", "ts": "1700000000.000100"})


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(database_url)
    yield eng
    await eng.dispose()


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def planted() -> dict[str, Any]:
    n = notification(agent=EMAIL, summary=f"{MENTION} call {PHONE} about card {CARD}")
    payload = n.to_dict()
    payload["scope"] = {**payload["scope"], "domain": PHONE}
    payload["labels"] = {**payload["labels"], "domain": PHONE, "team": f"{MENTION} {CARD}"}
    payload["description"] = f"<@U123> {EMAIL}"
    return payload


def assert_clean(raw: bytes) -> None:
    """No planted PII anywhere; no Slack mention syntax in what goes to Slack (the webhook and
    Alertmanager get JSON text, not mrkdwn: they carry the summary as written, redacted)."""
    head, _, body = raw.partition(b"\n\n")
    to_slack = head.startswith((b"POST /api/chat.", b"POST /services/"))
    texts = [unquote_plus(raw.decode())]
    try:
        texts += strings(json.loads(body))
    except ValueError:
        texts.append(unquote_plus(body.decode()))  # form-encoded (slack-sdk may send a form)
    for text in texts:
        for secret in (EMAIL, PHONE, CARD, "7946 0958", "4111"):
            assert secret not in text, (secret, text[:300])
        if to_slack:
            assert "<!" not in text and "<@" not in text, text[:300]


async def test_every_outgoing_byte_is_redacted_and_escaped(engine: AsyncEngine) -> None:
    capture = Capture()
    async with capture:
        base = capture.base_url
        sinks: dict[str, Sink] = {
            "webhook": WebhookSink(f"{base}/hook", SECRET),
            "alertmanager": AlertmanagerSink(base, DASH),
            "slack": SlackSink("xoxb-egress-token-123456", "C1", DASH, base_url=f"{base}/api/"),
            "slackhook": SlackWebhookSink(f"{base}/services/T/B/x", DASH),
        }
        payload = planted()
        member = Notification.from_dict(payload)
        group = GroupedNotification(
            "g1",
            f"agent={EMAIL},domain={PHONE}",
            {"team": f"{MENTION} {CARD}"},
            (member,),
            member.created_at,
        ).to_dict()
        n = Notifier(engine, sinks, default_retry(3))
        await enqueue(engine, [payload, group], list(sinks))
        assert await n.run_once(datetime.now(UTC)) == 8
        await asyncio.gather(*(s.aclose() for s in sinks.values()))
    assert len(capture.requests) == 8
    for raw in capture.requests:
        assert_clean(raw)
    joined = b"".join(capture.requests).decode()
    assert "[email]" in joined and "[phone]" in joined and "[card]" in joined
    assert "&lt;!channel&gt;" in joined or "\\u0026lt;!channel" in joined


async def test_a_hanging_sink_does_not_delay_the_others(engine: AsyncEngine) -> None:
    release = asyncio.Event()
    hanging, other = WebhookReceiver(SECRET), WebhookReceiver(SECRET)
    hanging.push(*[Hold(release) for _ in range(10)])
    slack = SlackServer()
    async with hanging, other, slack:
        sinks: dict[str, Sink] = {
            "hang": WebhookSink(hanging.url, SECRET),
            "webhook": WebhookSink(other.url, SECRET),
            "slack": SlackSink(slack.token, slack.channel, DASH, base_url=f"{slack.base_url}/api/"),
        }
        n = Notifier(engine, sinks, default_retry(3), lease_s=40.0, poll_interval_s=0.2)
        stop = asyncio.Event()
        runner = asyncio.create_task(n.run(stop))
        try:
            await enqueue(engine, [notification(rule="r1")], list(sinks))
            await asyncio.sleep(1.0)  # r1 delivered by two sinks; the hanging one holds it
            started = time.monotonic()
            await enqueue(engine, [notification(rule="r2")], list(sinks))
            while len(other.accepted) < 2 or len(slack.messages) < 2:
                assert time.monotonic() - started < 5, "a hanging sink delayed the others"
                await asyncio.sleep(0.05)
            assert len(hanging.received) >= 1  # its first request is still held
            assert [r.body["rule"] for r in other.accepted] == ["r1", "r2"]
        finally:
            release.set()
            stop.set()
            await asyncio.wait_for(runner, 30)
            await asyncio.gather(*(s.aclose() for s in sinks.values()))
