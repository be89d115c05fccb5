"""Admission of an HTTP request before its body is read: rates and media types (pure).

Each endpoint class (ingest, gate, read) has a :class:`Guard`: an authenticated request takes a
token from its credential's bucket (keyed by the credential's identity,
:func:`monitor.auth.admission.rate_key`), a request that failed authentication takes one from its
peer address's bucket (shared by every endpoint, so a stranger is bounded whatever token it
invents). An empty bucket answers 429 with ``Retry-After``; the endpoint renders the
:class:`Refusal` in its own format (JSON, or OTLP's ``google.rpc.Status``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from monitor.core.errors import UnsupportedEncoding
from monitor.core.inflate import encoding_of
from monitor.core.rate_limit import RateLimiter, retry_after


@dataclass(frozen=True)
class Refusal:
    """An answer given instead of the endpoint's: status, message, machine reason, headers."""

    status: int
    message: str
    reason: str
    headers: dict[str, str] = field(default_factory=dict)


class Guard:
    """The rates of one endpoint class: per credential, and per peer for failed logins."""

    def __init__(self, credentials: RateLimiter, strangers: RateLimiter) -> None:
        self.credentials = credentials
        self.strangers = strangers

    def credential(self, key: str) -> Refusal | None:
        """None when the credential ``key`` may make a request now, else the 429."""
        wait = self.credentials.take(key)
        if not wait:
            return None
        rate = self.credentials.rate
        return Refusal(
            429,
            f"rate limit of {rate.per_s:g} requests/s (burst {rate.burst:g}) for this credential "
            "reached: retry after the Retry-After seconds",
            "rate_limited",
            {"Retry-After": retry_after(wait)},
        )

    def stranger(self, peer: str | None) -> Refusal | None:
        """For a request that failed authentication: None (answer it with the endpoint's
        401/403), or the 429 once the peer address made too many of them."""
        wait = self.strangers.take(f"peer:{peer or '?'}")
        if not wait:
            return None
        return Refusal(
            429,
            "too many unauthenticated requests from this address: retry after the "
            "Retry-After seconds",
            "rate_limited",
            {"Retry-After": retry_after(wait)},
        )


def media_type(content_type: str | None) -> str:
    """The lower-case media type of a ``Content-Type`` header, without parameters ("" when
    absent)."""
    return (content_type or "").split(";")[0].strip().lower()


def unsupported_media(content_type: str | None, accepted: tuple[str, ...]) -> Refusal:
    listed = ", ".join(a or "none" for a in accepted)
    return Refusal(
        415, f"Content-Type {content_type!r} is not supported: send {listed}", "unsupported_media"
    )


def unreadable(headers: Mapping[str, str], accepted: tuple[str, ...]) -> Refusal | None:
    """The 415 refusal of a request whose ``Content-Type`` is not one of ``accepted``
    (``unsupported_media``) or whose ``Content-Encoding`` is not supported
    (``unsupported_encoding``); None when its body can be read."""
    content_type = headers.get("Content-Type")
    if media_type(content_type) not in accepted:
        return unsupported_media(content_type, accepted)
    try:
        encoding_of(headers.get("Content-Encoding"))
    except UnsupportedEncoding as exc:
        return Refusal(415, str(exc), "unsupported_encoding")
    return None
