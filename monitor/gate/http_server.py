"""The aiohttp server settings of the worker and of the gate process (:mod:`monitor.gate.server`):
timeouts, no automatic decompression, JSON errors, refusals that quote nothing.

In the worker faust builds the aiohttp ``Application`` and ``AppRunner``;
:func:`application_options` are faust's ``web_application_options`` (the JSON-error
middleware and the connection handler's arguments) and :func:`install` (called from faust's
``on_webserver_init``) replaces the runner with a :class:`RefusingRunner`; the gate process
builds one itself. Its connections answer what no view can (aiohttp's parser errors: a
malformed request line, header or chunk, bytes after ``Connection: close``; a body cut short;
an exception out of a view) through :class:`Refusals`: JSON with a reason code
(:mod:`monitor.core.http_refusals`), counted, logged at most once a minute per reason, the
request's bytes never echoed nor logged.

Connection handler arguments: ``auto_decompress`` off (bodies are inflated by the endpoints,
streamed under their caps: :mod:`monitor.core.http_body`), ``keepalive_timeout`` (aiohttp arms
it when the connection opens, so it also closes a connection whose headers never complete),
``lingering_time`` (how long an unread body is drained after an early answer).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse
from aiohttp.web_server import Server

from monitor.core.http_refusals import REFUSALS, RefusalLog, classify
from monitor.core.http_settings import HttpSettings
from monitor.telemetry.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.gate.http_server")
JSON_TYPES = ("application/json", "application/x-protobuf")
REFUSAL_LOG_WINDOW_S = 60.0  # one log line per refusal reason per minute at most


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


class Refusals:
    """The requests a server refuses before any view answers them (aiohttp's parser, a body
    cut short, an exception out of a view): each answered as JSON with its reason
    (:func:`monitor.core.http_refusals.classify`, nothing of the request in it), counted per
    reason in ``monitor_http_refused_total{reason}`` and logged at most one line per reason
    per ``window_s`` (with the count held back since the last, the peer address, never a
    header value or a body byte; an internal error's line carries its traceback, redacted)."""

    def __init__(
        self,
        metrics: OpsMetrics | None,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = REFUSAL_LOG_WINDOW_S,
    ) -> None:
        self._metrics = metrics
        self._clock = clock
        self._log = RefusalLog(window_s)
        self._window = window_s
        if metrics is not None:  # every reason on /metrics from the start, at 0
            for reason in REFUSALS:
                metrics.http_refused.labels(reason)

    def refuse(self, peer: str | None, status: int, exc: BaseException | None) -> web.Response:
        """The answer to one refused request; counts it and logs it if a line is due."""
        refusal = classify(_class_names(exc), _description(exc), status)
        if self._metrics is not None:
            self._metrics.http_refused.labels(refusal.reason).inc()
        held = self._log.due(refusal.reason, self._clock())
        if held is not None:
            bug = refusal.reason == "internal_error"
            log.log(
                logging.ERROR if bug else logging.WARNING,
                "refused a request before any endpoint: %s (HTTP %d) from %s; %d more for "
                "this reason held back in the last %g s (all counted in "
                "monitor_http_refused_total)",
                refusal.reason,
                refusal.status,
                peer or "an unknown peer",
                held,
                self._window,
                exc_info=exc if bug else None,
            )
        reply = _json_error(refusal.status, refusal.message, refusal.reason)
        reply.force_close()
        return reply


def _class_names(exc: BaseException | None) -> list[str]:
    return [] if exc is None else [c.__name__ for c in type(exc).__mro__]


def _description(exc: BaseException | None) -> str:
    """The first line of a parser error's message (llhttp's fixed error reason; the quoted
    bytes follow on later lines). Only matched by :func:`classify`, never logged."""
    if isinstance(exc, HttpProcessingError) and not isinstance(exc, LineTooLong):
        return exc.message.split("\n", 1)[0] if isinstance(exc.message, str) else ""
    return ""


class RefusingHandler(RequestHandler):
    """A connection whose errors before any view (the HTTP parser's, a body cut short, an
    exception out of a view) are answered by its :class:`Refusals`. aiohttp's own
    ``handle_error`` logged each one with a traceback quoting the request's bytes and echoed
    them in a text answer; this one neither logs per request nor quotes."""

    def __init__(self, manager: Server, *, refusals: Refusals, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._refusals = refusals

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> StreamResponse:
        if request.writer.output_size > 0:  # an answer is under way: the connection is lost
            raise ConnectionError("an answer was already being sent")
        return self._refusals.refuse(request.remote, status, exc)


class RefusingServer(Server):
    def __init__(self, *args: Any, refusals: Refusals, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refusals = refusals

    def __call__(self) -> RequestHandler:
        return RefusingHandler(self, refusals=self._refusals, loop=self._loop, **self._kwargs)


class RefusingRunner(web.AppRunner):
    """An ``AppRunner`` whose server makes :class:`RefusingHandler` connections."""

    def __init__(self, app: web.Application, refusals: Refusals, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._refusals = refusals

    async def _make_server(self) -> Server:
        base = await super()._make_server()
        return RefusingServer(
            base.request_handler,
            request_factory=base.request_factory,
            handler_cancellation=base.handler_cancellation,
            loop=base._loop,
            refusals=self._refusals,
            **base._kwargs,
        )


def install(web_driver: Any, refusals: Refusals) -> None:
    """Give faust's aiohttp web driver the refusing runner (before its server starts), without
    an access log."""
    web_driver._runner = RefusingRunner(web_driver.web_app, refusals, access_log=None)
