"""Every exception the monitor raises on purpose, in one tree.

    MonitorError                      base of everything below
    ├── ConfigError                   a setting or a config file is wrong (names file, line, field)
    │   └── BufferInUse               another process holds the gate's disk-buffer directory
    ├── FieldProblem (ValueError)     a config model's validator rejects a field below it; the
    │                                 YAML loader turns it into a ConfigError naming the line
    ├── KeyDefinitionError (ValueError)  an API key's scope or agent pattern is invalid
    ├── InvalidEvent                  an input event breaks agent-event/v1 (carries reason + field)
    ├── ReplayError                   an input file cannot be read as JSON Lines or tau2 results
    ├── StoreUnavailable              Postgres cannot be read or written (after the retry budget
    │                                 where there is one); an endpoint answers 503
    ├── InfraError                    an embedded component (broker, Postgres) failed to start
    │   └── WorkerFailed              the worker of ``monitor up`` died or never became healthy
    ├── StackBusy                     another ``monitor up`` holds the state directory
    ├── UnsupportedEncoding           Content-Encoding not identity, gzip or deflate (415)
    ├── BodyTooLarge                  a request body (declared, raw, inflated or its event count)
    │                                 is above its limit, or a decompression bomb (413)
    ├── BodyTimeout                   a request body did not arrive within the deadline (408)
    ├── BadEncoding                   a request body is not valid data of its Content-Encoding (400)
    ├── BadBody                       an ingest body is neither a JSON array, an object nor NDJSON
    ├── UnsupportedMediaType          an OTLP body is neither protobuf nor JSON (415)
    ├── UndecodableBody               not a valid OTLP export request in its encoding (400)
    ├── Busy                          no body slot freed up within the wait (503, Retry-After)
    ├── GateRequestError              a gate request refused with a 4xx status and a reason
    ├── UnknownAgent                  no gate policy rule covers the agent (404)
    ├── Refused                       the broker refuses a decision event for good (dropped)
    ├── MalformedOutput (ValueError)  a judge model's reply cannot be turned into verdicts
    ├── InvalidSignature              a webhook signature does not verify (malformed, expired,
    │                                 mismatch)
    ├── GrafanaPushError              Grafana refused the dashboards or cannot be reached
    │   └── GrafanaAuthError          Grafana answered 401/403
    └── EmitterError                  the SDK's emitters and gate client (``monitor.sdk``)
        ├── EmitterNotRunning         ``send`` before ``start()`` or after ``close()``
        ├── DeliveryError             events the broker did not acknowledge (flush/close)
        ├── BufferFull                no send-buffer space freed within the timeout
        ├── GateError                 the gate answered with a refusal (status + reason)
        │   └── GateRateLimited       it asked to wait (429/503 with Retry-After)
        └── GateUnavailable           the gate could not be reached or did not answer in time

Callers catch ``MonitorError`` to handle anything the monitor itself reports; library errors
(asyncpg, aiokafka) are wrapped only where the caller could act on them differently. The
classes that also derive from ``ValueError`` are raised where a ``ValueError`` is expected
(pydantic validators, parsers).

Private control-flow exceptions that never leave their module are not part of the tree and
stay beside the code that raises and catches them (the ingest writer's claim, the paused
retry's stop, a rolled-back connection).
"""

from __future__ import annotations

from typing import Any


class MonitorError(Exception):
    """Base class of every error the monitor raises deliberately."""


class ConfigError(MonitorError):
    """A setting or configuration file is invalid; the message names where and which field."""


class BufferInUse(ConfigError):
    """Another process holds the buffer directory."""


class FieldProblem(MonitorError, ValueError):
    """A validation failure located at ``path`` below the model that raised it.

    ``also`` optionally names where the same thing was first defined (duplicates); the
    loader reports it as ``(first defined at <field>, line <n>)``.
    """

    def __init__(
        self,
        path: tuple[str | int, ...],
        message: str,
        also: tuple[str | int, ...] | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.message = message
        self.also = also


class KeyDefinitionError(MonitorError, ValueError):
    """An invalid key definition (scope, agent pattern), with a message naming it."""


class InvalidEvent(MonitorError):
    """An event does not satisfy the agent-event/v1 contract.

    Attributes:
        reason: machine-readable code (``not_json``, ``oversize``, ``missing_field``,
            ``wrong_type``, ``out_of_range``, ``unknown_type``, ``multiple_payloads``,
            ``missing_payload``, ``payload_mismatch``, ``unknown_field``, ``invalid_value``,
            ``attributes_too_large``, ``bad_schema``, ``invalid_character``, ``too_deep``,
            ``future_timestamp``; in the dead-letter table also ``store_rejected`` and
            ``conflicting_duplicate``, written by the ingest loop).
        field: dotted path of the offending field, or ``None`` for whole-event problems.
        detail: human-readable sentence naming the field and the rule broken.
    """

    def __init__(self, reason: str, field: str | None, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.field = field
        self.detail = detail

    def as_dict(self) -> dict[str, str | None]:
        """Return the error as the JSON object used in DLQ records and HTTP responses."""
        return {"reason": self.reason, "field": self.field, "detail": self.detail}


class ReplayError(MonitorError):
    """An input file for ``monitor replay`` cannot be read (unknown format, unreadable)."""


class StoreUnavailable(MonitorError):
    """The database could not be reached (for the whole retry budget where there is one)."""


class InfraError(MonitorError):
    """An embedded component (Tansu broker, embedded Postgres) failed to start or stop."""


class WorkerFailed(InfraError):
    """The worker or gate subprocess died or did not become healthy; ``log_tail`` is its last
    lines."""

    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(message)
        self.log_tail = log_tail


class StackBusy(MonitorError):
    """Another ``monitor up`` holds the state directory."""


class UnsupportedEncoding(MonitorError):
    """A ``Content-Encoding`` other than identity, gzip or deflate (-> 415)."""


class BodyTooLarge(MonitorError):
    """A request body above a limit: declared, raw or decoded bytes, the decompression ratio
    (a bomb) or the number of events in it (-> 413)."""


class BodyTimeout(MonitorError):
    """The body did not arrive within the read deadline (-> 408)."""


class BadEncoding(MonitorError):
    """A body that is not valid data of its ``Content-Encoding`` (-> 400)."""


class BadBody(MonitorError):
    """A decoded ingest body that is neither a JSON array, an object nor NDJSON (-> 400)."""


class UnsupportedMediaType(MonitorError):
    """An OTLP body that is neither protobuf nor JSON (-> 415)."""


class UndecodableBody(MonitorError):
    """Not a valid ExportTraceServiceRequest in the declared encoding (-> 400)."""


class Busy(MonitorError):
    """No body slot freed up within the wait (-> 503 with ``Retry-After``)."""


class GateRequestError(MonitorError):
    """A request the gate refuses: ``status`` (4xx), ``reason`` (code) and a human ``detail``."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.reason = reason
        self.detail = detail

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.detail, "reason": self.reason}


class UnknownAgent(MonitorError):
    """No policy rule covers the agent (the endpoint answers 404)."""


class Refused(MonitorError):
    """The broker refuses this record for good (e.g. above its size limit): retrying cannot
    help. It is dropped and counted (``dropped["refused"]``) instead of holding back the rest."""


class MalformedOutput(MonitorError, ValueError):
    """The judge model's reply cannot be turned into verdicts.

    Attributes:
        reason: machine-readable code: ``no_json`` (no JSON object in the text), ``invalid``
            (the object breaks the output shape: a missing field, a score outside [0, 1], an
            unknown category...), ``unknown_item`` (an item_id that is not an assistant message
            of the conversation), ``duplicate_item``, ``missing_item`` (an assistant message
            left ungraded).
        detail: a readable sentence naming the field or ids at fault (fed back to the model in
            the repair request).
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class InvalidSignature(MonitorError):
    """A webhook signature does not verify. ``reason``: ``malformed``, ``expired`` or
    ``mismatch``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class GrafanaPushError(MonitorError):
    """Grafana refused or could not be reached; the message says what to do."""


class GrafanaAuthError(GrafanaPushError):
    """Grafana answered 401/403: the token is missing, wrong or lacks the Editor role."""


class EmitterError(MonitorError):
    """Base of the errors the SDK emitters raise on purpose."""


class EmitterNotRunning(EmitterError):
    """``send`` (or a helper) was called before ``start()`` or after ``close()``."""


class DeliveryError(EmitterError):
    """Some events were not acknowledged by the broker (raised by ``flush``/``close``).

    Attributes:
        failed: how many events failed since the previous ``flush``/``close`` reported.
        events: those events (``AgentEvent``), in the order their delivery failed; re-sending
            them is safe because ``event_id`` is the idempotency key downstream.
        errors: the exception each one failed with (same order as ``events``).
    """

    def __init__(self, events: list[Any], errors: list[BaseException]) -> None:
        cause = f"; first error: {describe(errors[0])}" if errors else ""
        super().__init__(f"{len(events)} event(s) were not delivered to Kafka{cause}")
        self.failed = len(events)
        self.events = events
        self.errors = errors


class BufferFull(EmitterError):
    """No buffer space freed within the timeout: the broker is not acknowledging."""


class GateError(EmitterError):
    """The gate refused the request: ``status`` (HTTP) and ``reason`` (the gate's code)."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(f"gate answered {status} ({reason}): {detail}")
        self.status, self.reason, self.detail = status, reason, detail


class GateRateLimited(GateError):
    """The gate asked to wait (429 or 503 with ``Retry-After``), or the client is still
    waiting as it asked: ``retry_after_s`` seconds remain before the next request is sent."""

    def __init__(self, status: int, reason: str, detail: str, retry_after_s: float) -> None:
        super().__init__(status, reason, f"{detail} (retry after {retry_after_s:.1f} s)")
        self.retry_after_s = retry_after_s


class GateUnavailable(EmitterError):
    """The gate could not be reached or did not answer in time (apply your fail mode)."""


def describe(exc: BaseException) -> str:
    """``"Type: message"`` without repeating the type when the message already starts with it."""
    text, name = str(exc), type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}" if text else name
