"""Every exception the monitor raises on purpose, in one tree.

    MonitorError                      base of everything below
    ├── ConfigError                   a setting or a config file is wrong (names file, line, field)
    ├── InvalidEvent                  an input event breaks agent-event/v1 (carries reason + field)
    ├── ReplayError                   an input file cannot be read as JSON Lines or tau2 results
    ├── StoreUnavailable              Postgres cannot be reached after the retry budget
    └── InfraError                    an embedded component (broker, Postgres) failed to start

Callers catch ``MonitorError`` to handle anything the monitor itself reports; library errors
(asyncpg, aiokafka) are wrapped only where the caller could act on them differently.
"""

from __future__ import annotations


class MonitorError(Exception):
    """Base class of every error the monitor raises deliberately."""


class ConfigError(MonitorError):
    """A setting or configuration file is invalid; the message names where and which field."""


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
    """The database stayed unreachable for the whole retry budget."""


class InfraError(MonitorError):
    """An embedded component (Tansu broker, embedded Postgres) failed to start or stop."""
