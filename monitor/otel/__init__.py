"""OpenTelemetry in: OTLP/HTTP traces and logs (``POST /v1/traces``, ``POST /v1/logs``) mapped
to agent-event/v1.

- ``spans``: the neutral span model; ``messages``: chat messages of an LLM span under the GenAI,
  OpenInference and OpenLLMetry conventions; ``mapping``: spans -> events (pure, docs/otel.md);
  ``log_events``: GenAI event log records and the content they give their span;
- ``decode`` / ``decode_logs``: OTLP protobuf/JSON/gzip decoding and OTLP answers
  (``opentelemetry-proto``);
- ``assembly`` (pure) / ``pending`` (Postgres) / ``traces``: whole traces across export
  requests, with the log records waiting for their spans; ``sweeper``: the fallback for traces
  whose root (or content) never came;
- ``receiver`` / ``log_receiver``: the endpoints' logic as pure async functions, wired by
  ``monitor.worker.app``; ``grpc_receiver``: the same over OTLP/gRPC.
"""

from __future__ import annotations

from monitor.config import Settings
from monitor.otel.mapping import MappingConfig
from monitor.otel.receiver import TraceLimits


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def mapping_config(settings: Settings) -> MappingConfig:
    """The mapping configuration of ``settings`` (the ``otel_*`` settings)."""
    return MappingConfig(
        confidence_attributes=_names(settings.otel_confidence_attributes),
        escalation_tools=_names(settings.otel_escalation_tools),
        escalation_attributes=_names(settings.otel_escalation_attributes)
        or ("monitor.escalation",),
    )


def trace_limits(settings: Settings) -> TraceLimits:
    """Size limits of ``/v1/traces``: those of ``/v1/events``."""
    return TraceLimits(
        max_body_bytes=settings.http_max_body_bytes,
        max_spans=settings.http_max_events,
        read_timeout_s=settings.http_read_timeout_s,
        max_inflate_ratio=settings.http_max_inflate_ratio,
        inline_parse_bytes=settings.http_inline_parse_bytes,
    )


# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "evaluation_export",
    "grpc_receiver",
    "log_receiver",
    "pending",
    "receiver",
    "sweeper",
    "topic",
    "traces",
)
