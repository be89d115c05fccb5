"""Webhook bodies and their HMAC-SHA256 signatures. Pure (hmac, hashlib, json only).

Scheme (documented for receivers in other languages):

- body: the UTF-8 bytes of the JSON payload, as sent (``encode_body`` gives the canonical
  form: sorted keys, no spaces, non-ASCII kept);
- signed bytes: ``f"{timestamp}."`` (Unix seconds, decimal) followed by the body bytes;
- header ``X-Monitor-Signature: t=<timestamp>,v1=<hex HMAC-SHA256(secret, signed bytes)>``;
  during a secret rotation the sender may add several ``v1=`` entries (one per secret);
- header ``Idempotency-Key``: the notification's key; receivers drop a key seen before.

A receiver verifies with :func:`verify`: a ``v1`` must match one of its secrets (constant-time
comparison) and ``|now - t|`` must be within the tolerance (replay protection).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ParamSpec

from monitor.core.errors import InvalidSignature

P = ParamSpec("P")

SIGNATURE_HEADER = "X-Monitor-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"
DEFAULT_TOLERANCE_S = 300.0


def encode_body(payload: Mapping[str, Any]) -> bytes:
    """Canonical JSON bytes of a payload (sorted keys, compact). Raises TypeError/ValueError
    for values JSON cannot carry (NaN included)."""
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def _key(secret: str | bytes) -> bytes:
    key = secret.encode() if isinstance(secret, str) else secret
    if not key:
        raise ValueError("the signing secret is empty")
    return key


def compute(secret: str | bytes, timestamp: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``f"{timestamp}.".encode() + body`` under ``secret``."""
    signed = f"{int(timestamp)}.".encode() + body
    return hmac.new(_key(secret), signed, hashlib.sha256).hexdigest()


def sign(secrets: str | bytes | Iterable[str | bytes], timestamp: int, body: bytes) -> str:
    """The header value ``t=<timestamp>,v1=<hex>[,v1=<hex>...]`` (one ``v1`` per secret).

    ``timestamp`` is Unix seconds (the caller passes its clock). Raises ValueError for an
    empty secret or no secret.
    """
    keys = [secrets] if isinstance(secrets, str | bytes) else list(secrets)
    if not keys:
        raise ValueError("at least one secret is required")
    return ",".join([f"t={int(timestamp)}", *(f"v1={compute(k, timestamp, body)}" for k in keys)])


def parse_header(header: str) -> tuple[int, list[str]]:
    """Split a header value into (timestamp, v1 signatures); unknown schemes are ignored.

    Raises InvalidSignature(``malformed``) without exactly one integer ``t`` or any ``v1``.
    """
    timestamps: list[str] = []
    sigs: list[str] = []
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            raise InvalidSignature("malformed", f"part {part.strip()!r} is not name=value")
        if name == "t":
            timestamps.append(value)
        elif name == "v1":
            sigs.append(value)
    if len(timestamps) != 1 or not timestamps[0].isdigit():
        raise InvalidSignature("malformed", "expected exactly one integer t=<unix seconds>")
    if not sigs:
        raise InvalidSignature("malformed", "no v1 signature")
    return int(timestamps[0]), sigs


def verify(
    secrets: str | bytes | Iterable[str | bytes],
    header: str,
    body: bytes,
    now: float,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> int:
    """Check a signature header against ``body``; returns the signed timestamp.

    ``now`` is the receiver's Unix time in seconds. Raises InvalidSignature: ``malformed``
    (unparseable header), ``expired`` (``|now - t| > tolerance_s``), ``mismatch`` (no ``v1``
    matches any secret: wrong secret, or body/timestamp tampered with).
    """
    timestamp, sigs = parse_header(header)
    if abs(now - timestamp) > tolerance_s:
        raise InvalidSignature(
            "expired", f"timestamp {timestamp} is {abs(now - timestamp):.0f}s from now"
        )
    keys = [secrets] if isinstance(secrets, str | bytes) else list(secrets)
    for key in keys:
        expected = compute(key, timestamp, body)
        if any(hmac.compare_digest(expected.encode(), s.encode()) for s in sigs):
            return timestamp
    raise InvalidSignature("mismatch", "no v1 signature matches")


def _succeeds(check: Callable[P, object]) -> Callable[P, bool]:
    """``check`` as a boolean: True when it returns, False when it raises InvalidSignature."""

    def succeeds(*args: P.args, **kwargs: P.kwargs) -> bool:
        try:
            check(*args, **kwargs)
        except InvalidSignature:
            return False
        return True

    return succeeds


#: ``verify`` as a boolean (False for any InvalidSignature), with the same arguments.
is_valid = _succeeds(verify)
