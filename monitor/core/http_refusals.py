"""Requests refused before any endpoint sees them: their answer, reason code and log budget.
Pure.

The HTTP parser (aiohttp's llhttp) refuses a malformed request with an exception whose text
quotes the offending bytes: a header line (``Authorization: Bearer ...``), the request line or
the body (bytes after a request that said ``Connection: close``, a broken chunk). A body cut
short while an endpoint reads it raises in the endpoint. :func:`classify` turns such an
exception, described by its class names and the parser's one-line description, into a
:class:`Refusal`: a status, a reason code and a fixed message. Nothing of the exception's text
goes into the refusal, so an answer built from it cannot echo a byte of the request.

:class:`RefusalLog` lets one log line per reason through per window and counts the others, so
a flood of malformed requests writes a handful of lines a minute, whatever its rate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    """The answer to a refused request: ``status``, machine-readable ``reason`` and a fixed
    human-readable ``message`` (never text from the request)."""

    status: int
    reason: str
    message: str


def _r(status: int, reason: str, message: str) -> Refusal:
    return Refusal(status, reason, message)


#: Every reason a refusal can carry, by reason code.
REFUSALS: dict[str, Refusal] = {
    r.reason: r
    for r in (
        _r(400, "bad_method", "malformed request line: not an HTTP method"),
        _r(400, "tls_on_plain_http", "TLS sent to a plain HTTP port"),
        _r(400, "bad_request_line", "malformed request line or HTTP version"),
        _r(400, "bad_url", "malformed request target"),
        _r(400, "line_too_long", "a request line or header line is over the size limit"),
        _r(431, "too_many_headers", "too many header lines"),
        _r(400, "bad_header", "malformed header line (a control character or no field name)"),
        _r(400, "bad_content_length", "malformed or repeated Content-Length"),
        _r(400, "bad_transfer_encoding", "unknown Transfer-Encoding, or one with Content-Length"),
        _r(400, "bad_chunked", "malformed chunked body"),
        _r(400, "data_after_close", "bytes after a request that said Connection: close"),
        _r(400, "incomplete_body", "the body ended before its Content-Length"),
        _r(400, "connection_lost", "the connection closed while the body was read"),
        _r(400, "bad_request", "malformed HTTP request"),
        _r(504, "handler_timeout", "the request was not answered in time"),
        _r(500, "internal_error", "internal server error"),
    )
}

# Exception class names (aiohttp.http_exceptions and builtins) -> reason, most specific first:
# the first class of an exception's MRO found here decides.
_BY_CLASS = {
    "LineTooLong": "line_too_long",
    "BadHttpMethod": "bad_method",
    "BadStatusLine": "bad_request_line",
    "InvalidURLError": "bad_url",
    "InvalidHeader": "bad_header",
    "ContentLengthError": "incomplete_body",
    "TransferEncodingError": "bad_chunked",
    "ConnectionResetError": "connection_lost",  # aiohttp: the client left mid-body
}

# llhttp's error reasons (the first line of a BadHttpMessage's text) -> reason, checked in
# order as lower-case substrings.
_BY_DESCRIPTION = (
    ("https traffic", "tls_on_plain_http"),
    ("too many headers", "too_many_headers"),
    ("connection: close", "data_after_close"),
    ("chunk", "bad_chunked"),
    ("transfer-encoding", "bad_transfer_encoding"),
    ("content-length", "bad_content_length"),
    ("header", "bad_header"),
    ("method", "bad_method"),
    ("url", "bad_url"),
    ("version", "bad_request_line"),
)

# The parser's own error classes: an exception of one of them is the client's fault.
_PARSER_ERROR = "HttpProcessingError"


def classify(class_names: Iterable[str], description: str, status: int) -> Refusal:
    """The refusal for an exception whose MRO has ``class_names`` (most specific first),
    described by ``description`` (the first line of the parser's message; only matched, never
    copied) and answered by the server with ``status`` (no exception: 504 is a handler's
    timeout, anything else an internal error)."""
    names = list(class_names)
    desc = description.lower()
    for name in names:
        if name in _BY_CLASS:
            reason = _BY_CLASS[name]
            if reason == "bad_method" and "https traffic" in desc:
                reason = "tls_on_plain_http"
            return REFUSALS[reason]
    if _PARSER_ERROR in names:
        for needle, reason in _BY_DESCRIPTION:
            if needle in desc:
                return REFUSALS[reason]
        return REFUSALS["bad_request"]
    if not names and status == 504:
        return REFUSALS["handler_timeout"]
    return REFUSALS["internal_error"]


class RefusalLog:
    """Which refusals get a log line: the first of each reason, then one per ``window_s``
    seconds; the others are counted and reported by the next line of their reason."""

    def __init__(self, window_s: float = 60.0) -> None:
        self._window = window_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def due(self, reason: str, now: float) -> int | None:
        """None when the refusal is held back; otherwise a line is due and this is how many
        refusals of ``reason`` were held back since the previous line. ``now`` in seconds
        (a monotonic clock)."""
        last = self._last.get(reason)
        if last is not None and now - last < self._window:
            self._held[reason] = self._held.get(reason, 0) + 1
            return None
        self._last[reason] = now
        return self._held.pop(reason, 0)
