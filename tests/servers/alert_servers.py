"""Real HTTP servers on 127.0.0.1 for the alert delivery tests (aiohttp.web, test event loop).

- :class:`SlackServer` speaks the Slack Web API (``POST /api/chat.postMessage``, JSON or form,
  bearer token checked, ``{"ok": true, "channel", "ts"}``) and incoming webhooks
  (``POST /services/...``, answering ``ok``). Scripted answers: :class:`Status`,
  :class:`SlackError` (``ok: false`` with a code, optional ``Retry-After``).
- :class:`WebhookReceiver` verifies ``X-Monitor-Signature`` with
  :func:`monitor.alerts.signing.verify`, drops repeats by ``Idempotency-Key`` (recorded on
  receipt, before answering) and can hold answers (:class:`Hold`) to let a test kill the sender
  between sending and recording.

Each server can :meth:`stop` and :meth:`start` again on the same port (a sink that is down:
connection refused).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from monitor.alerts.signing import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, verify
from monitor.alerts.states import Kind, Notification, fingerprint
from monitor.core.errors import InvalidSignature
from tests.servers.scripted import Status


@dataclass(frozen=True)
class SlackError:
    """``{"ok": false, "error": code}`` with an HTTP status and optional Retry-After."""

    code: str
    status: int = 200
    retry_after: str | None = None


@dataclass
class Hold:
    """Record the request, then answer 200 only once ``release`` is set."""

    release: asyncio.Event


Action = Status | SlackError | Hold


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalServer:
    """Base: an aiohttp app on 127.0.0.1:port with a queue of scripted actions."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.script: deque[Action] = deque()
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        raise NotImplementedError

    def push(self, *actions: Action) -> None:
        """Queue answers for the next requests (then the default success)."""
        self.script.extend(actions)

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> LocalServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@dataclass(frozen=True)
class SlackPost:
    """One accepted or refused call as the Slack server got it."""

    path: str
    token: str | None
    body: dict[str, Any]
    answered: int


class SlackServer(LocalServer):
    """Slack Web API + incoming webhooks. ``posts`` records every request in order;
    ``messages`` the accepted ``chat.postMessage`` calls with the ``ts`` they got."""

    def __init__(self, token: str = "xoxb-test-token-123456", channel: str = "C0ALERTS") -> None:
        super().__init__()
        self.token = token
        self.channel = channel
        self.posts: list[SlackPost] = []
        self.messages: list[dict[str, Any]] = []
        self._ts = 1_700_000_000

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/chat.postMessage", self._post_message)
        app.router.add_post("/services/{path:.*}", self._webhook)
        return app

    async def _body(self, request: web.Request) -> dict[str, Any]:
        raw = await request.text()
        if request.content_type == "application/json":
            body: dict[str, Any] = json.loads(raw)
            return body
        form: dict[str, Any] = dict(parse_qsl(raw))
        for key in ("blocks", "attachments"):
            if isinstance(form.get(key), str):
                form[key] = json.loads(form[key])
        return form

    def _scripted(self) -> web.Response | None:
        if not self.script:
            return None
        action = self.script.popleft()
        if isinstance(action, Status):
            return web.Response(status=action.status, text=action.body, headers=action.headers)
        if isinstance(action, SlackError):
            headers = {"Retry-After": action.retry_after} if action.retry_after else {}
            body = {"ok": False, "error": action.code}
            return web.json_response(body, status=action.status, headers=headers)
        raise AssertionError(f"unsupported action {action!r}")

    async def _post_message(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        body = await self._body(request)
        scripted = self._scripted()
        if scripted is not None:
            self.posts.append(SlackPost(request.path, token, body, scripted.status))
            return scripted
        if token != self.token:
            self.posts.append(SlackPost(request.path, token, body, 200))
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if body.get("channel") not in (self.channel, f"#{self.channel}"):
            self.posts.append(SlackPost(request.path, token, body, 200))
            return web.json_response({"ok": False, "error": "channel_not_found"})
        blocks = body.get("blocks")
        if not isinstance(blocks, list) or not blocks or not body.get("text"):
            self.posts.append(SlackPost(request.path, token, body, 200))
            return web.json_response({"ok": False, "error": "invalid_blocks"})
        self._ts += 1
        ts = f"{self._ts}.000100"
        self.posts.append(SlackPost(request.path, token, body, 200))
        self.messages.append({**body, "ts": ts})
        return web.json_response({"ok": True, "channel": self.channel, "ts": ts})

    async def _webhook(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        scripted = self._scripted()
        status = 200 if scripted is None else scripted.status
        self.posts.append(SlackPost(request.path, None, body, status))
        if scripted is not None:
            return scripted
        self.messages.append(body)
        return web.Response(text="ok")


@dataclass(frozen=True)
class Received:
    """One webhook request: its key, verified body, and whether it was a repeat."""

    key: str
    body: dict[str, Any]
    duplicate: bool
    at: float


class WebhookReceiver(LocalServer):
    """``POST /hook``: 401 on a bad signature, else records and answers 200 (or the script).

    ``received`` lists every verified request in arrival order; ``accepted`` the first of each
    idempotency key (what a real receiver would act on); ``duplicates`` the repeats it dropped.
    """

    def __init__(self, secret: str, port: int | None = None) -> None:
        super().__init__(port)
        self.secret = secret
        self.received: list[Received] = []
        self.rejected: list[str] = []
        self.hold_after: tuple[int, asyncio.Event] | None = None
        self._seen: set[str] = set()

    def hold_from(self, count: int, release: asyncio.Event) -> None:
        """Answer the first ``count`` requests, then hold every answer until ``release``."""
        self.hold_after = (count, release)

    @property
    def url(self) -> str:
        return f"{self.base_url}/hook"

    @property
    def accepted(self) -> list[Received]:
        return [r for r in self.received if not r.duplicate]

    @property
    def duplicates(self) -> list[Received]:
        return [r for r in self.received if r.duplicate]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        return app

    async def _hook(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            verify(self.secret, request.headers.get(SIGNATURE_HEADER, ""), raw, time.time())
        except InvalidSignature as exc:
            self.rejected.append(exc.reason)
            return web.json_response({"error": exc.reason}, status=401)
        key = request.headers.get(IDEMPOTENCY_HEADER, "")
        scripted = self.script.popleft() if self.script else None
        if isinstance(scripted, Status):
            return web.Response(
                status=scripted.status, text=scripted.body, headers=scripted.headers
            )
        duplicate = key in self._seen
        self._seen.add(key)
        self.received.append(Received(key, json.loads(raw), duplicate, time.monotonic()))
        if isinstance(scripted, Hold):
            await scripted.release.wait()
        if self.hold_after is not None and len(self.received) > self.hold_after[0]:
            await self.hold_after[1].wait()
        return web.json_response({"accepted": not duplicate, "key": key})


def notification(
    rule: str = "ece-tier3",
    agent: str = "billing",
    kind: str = "firing",
    fired_at: datetime | None = None,
    sequence: int = 0,
    summary: str = "ECE above 0.05 on billing",
    severity: str = "critical",
    value: float | None = 0.1234,
) -> Notification:
    """A notification as the lifecycle would emit it (key ``fp:fired_at:kind:sequence``)."""
    fired = fired_at or datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    scope = {"agent": agent, "domain": "refunds", "tier": "3"}
    fp = fingerprint(rule, scope)
    resolved = fired + timedelta(minutes=42) if kind == "resolved" else None
    created = resolved or fired + timedelta(hours=4 * sequence)
    return Notification(
        idempotency_key=f"{fp}:{fired.isoformat()}:{kind}:{sequence}",
        kind=Kind(kind),
        sequence=sequence,
        fingerprint=fp,
        rule=rule,
        metric="ece",
        severity=severity,
        scope=scope,
        labels={**scope, "alertname": rule, "severity": severity, "metric": "ece", "team": "cx"},
        summary=summary,
        description="Calibration of {agent} degraded.".replace("{agent}", agent),
        runbook_url="https://runbooks.example.com/ece",
        value=value,
        threshold=0.05,
        comparison=">",
        samples=250.0,
        window="1h",
        fired_at=fired,
        resolved_at=resolved,
        created_at=created,
    )
