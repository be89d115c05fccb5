"""Webhook bodies and their signatures."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.alerts.signing import (
    encode_body,
    is_valid,
    parse_header,
    sign,
    verify,
)
from monitor.core.errors import InvalidSignature

BODY = encode_body({"kind": "firing", "value": 0.12, "rule": "ece_tier3", "note": "é"})
NOW = 1_740_830_400


def test_body_is_canonical() -> None:
    assert encode_body({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'
    with pytest.raises(ValueError):
        encode_body({"x": float("nan")})


def test_signature_round_trip_and_known_vector() -> None:
    header = sign("s3cret", NOW, BODY)
    assert header.startswith(f"t={NOW},v1=")
    assert parse_header(header) == (NOW, [header.split("v1=")[1]])
    assert verify("s3cret", header, BODY, now=NOW + 10) == NOW


def test_known_vector_matches_hmac_module() -> None:
    import hashlib
    import hmac

    expected = hmac.new(b"key", b"1.{}", hashlib.sha256).hexdigest()
    assert sign("key", 1, b"{}") == f"t=1,v1={expected}"


@pytest.mark.parametrize(
    ("secret", "header_of", "body", "now", "reason"),
    [
        ("s3cret", lambda: sign("s3cret", NOW, BODY), BODY + b" ", NOW, "mismatch"),
        (
            "s3cret",
            lambda: sign("s3cret", NOW, BODY).replace(f"t={NOW}", f"t={NOW + 1}"),
            BODY,
            NOW,
            "mismatch",
        ),
        ("other", lambda: sign("s3cret", NOW, BODY), BODY, NOW, "mismatch"),
        ("s3cret", lambda: sign("s3cret", NOW, BODY), BODY, NOW + 301, "expired"),
        ("s3cret", lambda: sign("s3cret", NOW, BODY), BODY, NOW - 301, "expired"),
        ("s3cret", lambda: "v1=abc", BODY, NOW, "malformed"),
        ("s3cret", lambda: f"t={NOW}", BODY, NOW, "malformed"),
        ("s3cret", lambda: "t=x,v1=ab", BODY, NOW, "malformed"),
        ("s3cret", lambda: f"t={NOW},v1=é", BODY, NOW, "mismatch"),
    ],
)
def test_tampering_is_detected(
    secret: str, header_of: Callable[[], str], body: bytes, now: int, reason: str
) -> None:
    header = header_of()
    with pytest.raises(InvalidSignature) as info:
        verify(secret, header, body, now=now)
    assert info.value.reason == reason
    assert not is_valid(secret, header, body, now=now)


def test_secret_rotation() -> None:
    header = sign(["new", "old"], NOW, BODY)
    assert header.count("v1=") == 2
    assert is_valid("old", header, BODY, NOW) and is_valid(["new"], header, BODY, NOW)
    assert is_valid(["x", "old"], sign("old", NOW, BODY), BODY, NOW)
    with pytest.raises(ValueError, match="empty"):
        sign("", NOW, BODY)


@given(st.binary(max_size=512), st.binary(min_size=1, max_size=64), st.integers(0, 2**40))
def test_any_body_verifies_and_any_flip_fails(body: bytes, secret: bytes, ts: int) -> None:
    header = sign(secret, ts, body)
    assert verify(secret, header, body, now=ts) == ts
    tampered = body + b"x"
    assert not is_valid(secret, header, tampered, now=ts)
