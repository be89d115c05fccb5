"""Log records redacted before any handler sees them."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from monitor.core.log_redaction import install_log_redaction, redact_record, redaction_for
from monitor.core.redact import redact, redact_secrets

KEY = "mk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


def record(
    name: str, msg: str, *args: object, exc: BaseException | None = None
) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, exc_info)


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_http_loggers_get_full_redaction_others_secrets_only() -> None:
    assert redaction_for("aiohttp.server") is redact
    assert redaction_for("monitor.gate.http_server") is redact
    assert redaction_for("asyncio") is redact
    assert redaction_for("monitor.ingest.loop") is redact_secrets
    assert redaction_for("aiohttpx") is redact_secrets  # a prefix is a logger, not a string


def test_message_arguments_and_traceback_are_redacted() -> None:
    r = record(
        "aiohttp.server",
        "Error handling request %s",
        f"Authorization: Bearer {KEY}",
        exc=raised(ValueError(f"b'X-Mail: jane@example.com {KEY}'")),
    )
    redact_record(r)
    out = logging.Formatter("%(message)s").format(r)
    assert KEY not in out and "jane@example.com" not in out
    assert "Authorization: [secret]" in out and "[email]" in out
    assert "Traceback" in out and "ValueError" in out


def test_a_record_with_nothing_to_redact_keeps_its_template() -> None:
    r = record("monitor.ingest.loop", "committed %d offsets to %s", 3, "postgres@db.example.com")
    redact_record(r)
    assert r.msg == "committed %d offsets to %s" and r.args == (3, "postgres@db.example.com")


@pytest.fixture
def installed() -> Iterator[None]:
    previous = logging.getLogRecordFactory()
    install_log_redaction()
    install_log_redaction()  # idempotent
    try:
        yield
    finally:
        logging.setLogRecordFactory(previous)


def test_installed_factory_redacts_what_any_handler_writes(installed: None) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("aiohttp.server.test-redaction")
    logger.addHandler(handler)
    try:
        try:
            raise RuntimeError(f"token={KEY}")
        except RuntimeError:
            logger.exception("request from %s with %s", "127.0.0.1", f"Bearer {KEY}")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert KEY not in text and "127.0.0.1" in text and "token=[secret]" in text
