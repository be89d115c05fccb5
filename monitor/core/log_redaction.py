"""Every log line of a process passed through the redaction the alert sinks use. Pure (the
standard library's logging only).

:func:`install_log_redaction` wraps the process's log record factory: each record that is
logged (after its logger's level check) has its message and its traceback formatted once and
redacted, before any handler sees it, whatever handlers the process configures later (faust
configures its own). Records of the loggers that can carry request data (:data:`HTTP_LOGGERS`:
the HTTP servers, the endpoints, asyncio's transport errors) get :func:`redact` (secrets,
card numbers, e-mails, phone numbers); all others :func:`redact_secrets`, so that a
database URL or a timestamp in an operational line stays readable. A record with nothing to
redact is left as it was (its message template intact, so filters keyed on the template,
``ingest.log_dedupe``, still group it).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from monitor.core.redact import redact, redact_secrets

#: Loggers (and their children) whose lines can quote a request: fully redacted.
HTTP_LOGGERS = (
    "aiohttp",
    "asyncio",
    "faust.web",
    "monitor.gate",
    "monitor.ingest.endpoint",
    "monitor.ingest.http",
    "monitor.otel.receiver",
    "monitor.auth",
    "monitor.analytics.calibration_endpoint",
    "monitor.core",
    "monitor.worker",
)

_MARK = "_monitor_redacting"


def redaction_for(name: str, full: tuple[str, ...] = HTTP_LOGGERS) -> Callable[[str], str]:
    """The redaction a record of logger ``name`` gets: :func:`redact` for ``full`` loggers
    and their children, :func:`redact_secrets` for the others."""
    if any(name == p or name.startswith(p + ".") for p in full):
        return redact
    return redact_secrets


def redact_record(record: logging.LogRecord, full: tuple[str, ...] = HTTP_LOGGERS) -> None:
    """Redact ``record`` in place: its formatted message, and its traceback (formatted into
    ``exc_text``, ``exc_info`` cleared so no formatter renders it again unredacted)."""
    scrub = redaction_for(record.name, full)
    try:
        message = record.getMessage()
    except Exception:  # a malformed format: the template and its arguments, as text
        message = f"{record.msg!s} {record.args!r}"
    clean = scrub(message)
    if clean != message:
        record.msg, record.args = clean, ()
    if record.exc_info and record.exc_info[0] is not None:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        record.exc_text, record.exc_info = scrub(text), None
    elif record.exc_text:
        record.exc_text = scrub(record.exc_text)
    if record.stack_info:
        record.stack_info = scrub(record.stack_info)


def install_log_redaction(full: tuple[str, ...] = HTTP_LOGGERS) -> None:
    """Make every record this process logs go through :func:`redact_record` (idempotent: a
    second call keeps the first factory)."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, _MARK, False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        redact_record(record, full)
        return record

    setattr(factory, _MARK, True)
    logging.setLogRecordFactory(factory)
