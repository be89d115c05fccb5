"""The HTTP server's limits, timeouts and request rates (``MONITOR_HTTP_*``;
docs/robustness.md).

:class:`HttpSettings` is a base of :class:`monitor.config.Settings`, which alone reads them
from the environment; they are declared here so that the settings module stays short.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from monitor.core.fields import non_negative, positive


class HttpSettings(BaseModel):
    """Timeouts, decompression and parsing limits, and per-credential request rates of the
    worker's web server (a base of ``Settings``; validated with it)."""

    http_idle_timeout_s: float = positive(
        15.0,
        "A connection is closed when idle this long (seconds): before its first request's "
        "headers are complete (a slowloris on the headers) and between keep-alive requests.",
    )
    http_read_timeout_s: float = positive(
        10.0,
        "The whole request body must arrive within this delay (seconds) once the handler "
        "reads it (408 and the connection closed after it).",
    )
    http_lingering_s: float = non_negative(
        2.0,
        "After an early answer (401, 413, 429...), the server reads and discards "
        "the unread body for at most this long, in seconds (so the client sees the answer), "
        "then closes.",
    )
    http_max_inflate_ratio: float = Field(
        default=100.0,
        ge=2,
        description="A gzip/deflate body inflating more than this many times its compressed "
        "size (checked once 1 MiB came out) is refused with 413; the inflated size is also "
        "capped at the endpoint's body limit.",
    )
    http_inline_parse_bytes: int = non_negative(
        64 * 1024,
        "Bodies up to this size in bytes are parsed on the event loop; larger ones in the "
        "parse threads.",
    )
    http_max_bodies_in_flight: int = Field(
        default=8,
        ge=1,
        description="Requests reading, parsing and publishing a POST /v1/events or /v1/traces "
        "body at once (bounds their memory); others wait for a slot up to the read timeout, "
        "then get 503 with Retry-After.",
    )
    http_parse_threads: int = Field(
        default=2, ge=1, le=16, description="Threads parsing large request bodies."
    )
    http_ingest_rate_per_s: float = non_negative(
        200.0, "Requests/s per credential on POST /v1/events and /v1/traces (0: off)."
    )
    http_ingest_rate_burst: float = Field(
        default=400.0,
        ge=1,
        description="Requests per credential on POST /v1/events and /v1/traces accepted at once "
        "before http_ingest_rate_per_s applies (token bucket size).",
    )
    http_gate_rate_per_s: float = non_negative(
        2000.0, "Requests/s per credential on POST /v1/gate (0: off)."
    )
    http_gate_rate_burst: float = Field(
        default=4000.0,
        ge=1,
        description="Requests per credential on POST /v1/gate accepted at once before "
        "http_gate_rate_per_s applies (token bucket size).",
    )
    http_read_rate_per_s: float = non_negative(
        50.0, "Requests/s per credential on GET /v1/calibration (0: off)."
    )
    http_read_rate_burst: float = Field(
        default=100.0,
        ge=1,
        description="Requests per credential on GET /v1/calibration accepted at once before "
        "http_read_rate_per_s applies (token bucket size).",
    )
    http_unauth_rate_per_s: float = non_negative(
        5.0,
        "Requests/s per peer address that fail authentication, all endpoints "
        "together; beyond the burst they are answered 429 (0: off).",
    )
    http_unauth_rate_burst: float = Field(
        default=20.0,
        ge=1,
        description="Failed authentications per peer address accepted at once before "
        "http_unauth_rate_per_s applies (token bucket size).",
    )
    http_rate_max_keys: int = Field(
        default=10_000,
        ge=16,
        description="Credentials and peers whose rate buckets are kept (the least recently "
        "used beyond).",
    )
