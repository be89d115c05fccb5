"""The gate client's reading of ``Retry-After`` and its wait (the real server:
tests/auth/test_rate_limit_flood.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from monitor.core.errors import GateError, GateRateLimited
from monitor.sdk.gate_client import RetryAfter, retry_after_s

NOW = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3", 3.0),
        (" 1.5 ", 1.5),
        ("-4", 0.0),
        ("Mon, 07 Dec 2026 12:00:10 GMT", 10.0),
        ("Mon, 07 Dec 2026 11:59:00 GMT", 0.0),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_seconds_or_an_http_date(value: str | None, seconds: float | None) -> None:
    assert retry_after_s(value, NOW) == seconds


def response(status: int, retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"error": "slow down", "reason": "rate_limited"}
    return httpx.Response(status, json=body, headers=headers)


def test_a_429_starts_the_wait_and_nothing_is_sent_until_it_passed() -> None:
    now = [100.0]
    wait = RetryAfter(lambda: now[0])
    wait.check()  # nothing to wait for yet
    with pytest.raises(GateRateLimited) as first:
        wait.answer(response(429, "2"))
    assert (first.value.status, first.value.retry_after_s) == (429, 2.0)
    now[0] = 101.5
    with pytest.raises(GateRateLimited) as held:
        wait.check()
    assert held.value.reason == "retry_after" and held.value.retry_after_s == pytest.approx(0.5)
    now[0] = 102.0
    wait.check()  # passed


def test_other_refusals_do_not_wait() -> None:
    wait = RetryAfter(lambda: 0.0)
    for r in (response(429), response(400, "5"), response(503)):
        with pytest.raises(GateError) as refused:
            wait.answer(r)
        assert not isinstance(refused.value, GateRateLimited)
        wait.check()
    with pytest.raises(GateRateLimited):  # a 503 with Retry-After waits too
        wait.answer(response(503, "1"))
