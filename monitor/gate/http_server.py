"""The aiohttp server settings of the worker and of the gate process (:mod:`monitor.gate.server`):
timeouts, no automatic decompression, JSON errors.

In the worker faust builds the aiohttp ``Application`` and ``AppRunner``;
:func:`application_options` are
faust's ``web_application_options`` (the JSON-error middleware and the connection handler's
arguments) and :func:`install` (called from faust's ``on_webserver_init``) replaces the runner
with one whose connections answer aiohttp's own parser errors (malformed request line or
headers, bad chunking: 400, or 413/431 for an oversized header) as JSON.

Connection handler arguments: ``auto_decompress`` off (bodies are inflated by the endpoints,
streamed under their caps: :mod:`monitor.core.http_body`), ``keepalive_timeout`` (aiohttp arms
it when the connection opens, so it also closes a connection whose headers never complete),
``lingering_time`` (how long an unread body is drained after an early answer).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse
from aiohttp.web_server import Server

from monitor.core.http_settings import HttpSettings

JSON_TYPES = ("application/json", "application/x-protobuf")


def handler_args(settings: HttpSettings) -> dict[str, Any]:
    return {
        "auto_decompress": False,
        "keepalive_timeout": settings.http_idle_timeout_s,
        "lingering_time": settings.http_lingering_s,
    }


def _json_error(status: int, message: str, reason: str) -> web.Response:
    body = json.dumps({"error": message, "reason": reason}).encode()
    return web.Response(status=status, body=body, content_type="application/json")


@web.middleware
async def json_errors(request: web.Request, handler: Any) -> StreamResponse:
    """Every 4xx/5xx the routing or a view raises or answers in plain text becomes JSON."""
    try:
        response: StreamResponse = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        reply = _json_error(exc.status, exc.reason, "http_" + str(exc.status))
        for name in ("Allow", "Retry-After"):
            if name in exc.headers:
                reply.headers[name] = exc.headers[name]
        return reply
    if response.status >= 400 and response.content_type not in JSON_TYPES:
        text = (
            response.body.decode(errors="replace")
            if isinstance(response, web.Response) and isinstance(response.body, bytes)
            else ""
        )
        return _json_error(
            response.status, text.strip() or str(response.reason), "http_" + str(response.status)
        )
    return response


def application_options(settings: HttpSettings) -> dict[str, Any]:
    """faust's ``web_application_options``: the middleware and the handler arguments."""
    return {"middlewares": [json_errors], "handler_args": handler_args(settings)}


class JsonErrorHandler(RequestHandler):
    """A connection whose errors before any view (the HTTP parser's) are answered as JSON."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> StreamResponse:
        plain = super().handle_error(request, status, exc, message)  # logs; checks nothing sent
        reason = "bad_request" if status == 400 else "http_" + str(status)
        text = message if status < 500 and message else "internal server error"
        reply = _json_error(status, text, reason)
        reply.force_close()
        del plain
        return reply


class JsonErrorServer(Server):
    def __call__(self) -> RequestHandler:
        return JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class JsonErrorRunner(web.AppRunner):
    """An ``AppRunner`` whose server makes :class:`JsonErrorHandler` connections."""

    async def _make_server(self) -> Server:
        base = await super()._make_server()
        return JsonErrorServer(
            base.request_handler,
            request_factory=base.request_factory,
            handler_cancellation=base.handler_cancellation,
            loop=base._loop,
            **base._kwargs,
        )


def install(web_driver: Any) -> None:
    """Give faust's aiohttp web driver the JSON-error runner (before its server starts)."""
    web_driver._runner = JsonErrorRunner(web_driver.web_app, access_log=None)
