"""The alerting part of ``monitor up``: the simulated hour's alerts, delivered to a local
webhook receiver (or to the configured sinks) through the real outbox and notifier.

:class:`WebhookReceiver` is a real HTTP server on 127.0.0.1 (a free port) that verifies each
request's HMAC signature (:mod:`monitor.alerts.signing`), drops repeats by their idempotency
key, and keeps what it accepted. :func:`run_demo_alerts` replays the alerting of the run's time
span (:mod:`monitor.alerts.timeline`) with the default rules and returns the messages the
receiver got, in arrival order.
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from monitor.alerts.notifier import Notifier, default_retry
from monitor.alerts.rules import RuleSet
from monitor.alerts.signing import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, is_valid
from monitor.alerts.sinks.base import Sink
from monitor.alerts.sinks.webhook import WebhookSink
from monitor.alerts.timeline import Tick, replay_alert_timeline
from monitor.store.engine import make_engine


class WebhookReceiver:
    """A signed-webhook receiver on loopback; ``async with`` starts and stops it."""

    def __init__(self, on_message: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.secret = secrets.token_hex(16)
        self.messages: list[dict[str, Any]] = []
        self.rejected = 0
        self.duplicates = 0
        self._keys: set[str] = set()
        self._on_message = on_message
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/alerts"

    async def __aenter__(self) -> WebhookReceiver:
        app = web.Application()
        app.router.add_post("/alerts", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock, shutdown_timeout=0.5).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        header = request.headers.get(SIGNATURE_HEADER, "")
        if not is_valid(self.secret, header, body, time.time()):
            self.rejected += 1
            return web.json_response({"error": "bad signature"}, status=401)
        key = request.headers.get(IDEMPOTENCY_HEADER, "")
        if key in self._keys:
            self.duplicates += 1
            return web.json_response({"status": "duplicate"})
        self._keys.add(key)
        message = json.loads(body)
        self.messages.append(message)
        if self._on_message is not None:
            self._on_message(message)
        return web.json_response({"status": "accepted"})


async def run_demo_alerts(
    database_url: str,
    rules: RuleSet,
    start: datetime,
    end: datetime,
    *,
    step: timedelta = timedelta(minutes=5),
    drift_recent: timedelta = timedelta(minutes=40),
    drift_min_samples: int = 100,
    extra_sinks: dict[str, Sink] | None = None,
    on_message: Callable[[dict[str, Any]], None] | None = None,
    on_tick: Callable[[Tick], None] | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    dashboard_url: str | None = None,
) -> tuple[list[dict[str, Any]], list[Tick]]:
    """Replay ``[start, end]`` and deliver to a local receiver (plus ``extra_sinks``).

    No tick is later than ``clock()`` (the wall clock) at the start of the replay: alert
    history and outbox rows are never stamped in the future, and a row is never delivered
    before it was created. Returns (messages the receiver accepted, ticks). The sinks are
    closed afterwards. ``dashboard_url``: the Grafana the receiver's exemplar links open.
    """
    wall = clock()
    engine = make_engine(database_url)
    async with WebhookReceiver(on_message) as receiver:
        sinks: dict[str, Sink] = {
            "webhook": WebhookSink(receiver.url, receiver.secret, dashboard_url=dashboard_url)
        }
        sinks.update(extra_sinks or {})
        notifier = Notifier(engine, sinks, default_retry(3), lease_s=30)
        try:
            ticks = await replay_alert_timeline(
                engine,
                rules,
                start,
                end,
                step,
                sinks=sinks,
                notifier=notifier,
                drift_recent=drift_recent,
                drift_min_samples=drift_min_samples,
                on_tick=on_tick,
                not_after=wall,
            )
        finally:
            for sink in sinks.values():
                await sink.aclose()
            await engine.dispose()
        return list(receiver.messages), ticks
