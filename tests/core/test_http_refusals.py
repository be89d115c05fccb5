"""The refusal of a request the HTTP parser could not read: its reason from the exception, an
answer that quotes nothing, and the log budget per reason."""

from __future__ import annotations

import pytest
from aiohttp import http_exceptions as hx

from monitor.core.http_refusals import REFUSALS, RefusalLog, classify

SECRET = "Bearer mk_abcdefghijklmnopqrstuvwxyz012345"


def refusal_of(exc: BaseException | None, status: int = 400) -> tuple[int, str, str]:
    names = [] if exc is None else [c.__name__ for c in type(exc).__mro__]
    message = getattr(exc, "message", "")
    first = message.split("\n", 1)[0] if not isinstance(exc, hx.LineTooLong) else ""
    r = classify(names, first, status)
    return r.status, r.reason, r.message


@pytest.mark.parametrize(
    ("exc", "status", "reason"),
    [
        (
            hx.BadHttpMessage(f"Invalid header value char:\n\n  b'Authorization: {SECRET}'"),
            400,
            "bad_header",
        ),
        (hx.BadHttpMessage(f"Invalid header token:\n\n  b'{SECRET}'"), 400, "bad_header"),
        (
            hx.BadHttpMessage("Data after `Connection: close`:\n\n  b'{\"content\": 1}'"),
            400,
            "data_after_close",
        ),
        (hx.BadHttpMessage("Invalid character in chunk size:\n\n  b'ZZ'"), 400, "bad_chunked"),
        (hx.BadHttpMessage("Expected LF after chunk data:\n\n  b'x'"), 400, "bad_chunked"),
        (
            hx.BadHttpMessage("Invalid character in Content-Length:\n\n  b'1x'"),
            400,
            "bad_content_length",
        ),
        (hx.BadHttpMessage("Duplicate Content-Length"), 400, "bad_content_length"),
        (
            hx.BadHttpMessage("Transfer-Encoding can't be present with Content-Length:\n\n  b''"),
            400,
            "bad_transfer_encoding",
        ),
        (hx.BadHttpMessage("Too many headers received"), 431, "too_many_headers"),
        (hx.BadHttpMessage("Pause on PRI/Upgrade:\n\n  b''"), 400, "bad_request"),
        (hx.LineTooLong(SECRET.encode(), 8190), 400, "line_too_long"),
        (
            hx.BadHttpMethod(error=f"Invalid method encountered:\n\n  b'{SECRET}'"),
            400,
            "bad_method",
        ),
        (
            hx.BadHttpMethod(error="Received HTTPS traffic on an HTTP port"),
            400,
            "tls_on_plain_http",
        ),
        (
            hx.BadStatusLine(error=f"Bad status line:\n  Invalid HTTP version:\n  b'{SECRET}'"),
            400,
            "bad_request_line",
        ),
        (hx.InvalidURLError(f"Invalid char in url query:\n\n  b'/?{SECRET}'"), 400, "bad_url"),
        (
            hx.ContentLengthError("Not enough data to satisfy content length header."),
            400,
            "incomplete_body",
        ),
        (
            hx.TransferEncodingError("Not enough data to satisfy transfer length header."),
            400,
            "bad_chunked",
        ),
        (ConnectionResetError("Connection lost"), 400, "connection_lost"),
        (ValueError(SECRET), 500, "internal_error"),
        (ConnectionError("the bus"), 500, "internal_error"),  # not the client leaving
    ],
)
def test_the_reason_comes_from_the_exception_and_the_answer_quotes_nothing(
    exc: BaseException, status: int, reason: str
) -> None:
    got_status, got_reason, message = refusal_of(exc, 400 if status != 500 else 500)
    assert (got_status, got_reason) == (status, reason)
    assert message == REFUSALS[reason].message
    assert "mk_" not in message and "Bearer" not in message and "content" not in message


def test_a_handler_timeout_without_an_exception() -> None:
    assert refusal_of(None, 504)[:2] == (504, "handler_timeout")
    assert refusal_of(None, 500)[:2] == (500, "internal_error")


def test_every_refusal_is_a_client_or_server_error_with_its_own_reason() -> None:
    assert all(400 <= r.status < 600 and key == r.reason for key, r in REFUSALS.items())


def test_one_line_per_reason_per_window_with_the_count_held_back() -> None:
    log = RefusalLog(window_s=60.0)
    assert log.due("bad_header", 0.0) == 0
    assert [log.due("bad_header", t) for t in (1.0, 2.0, 59.0)] == [None, None, None]
    assert log.due("bad_chunked", 3.0) == 0  # each reason its own budget
    assert log.due("bad_header", 60.0) == 3
    assert log.due("bad_header", 61.0) is None
    assert log.due("bad_header", 200.0) == 1
    assert log.due("bad_header", 400.0) == 0
