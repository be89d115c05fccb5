"""A traceback per failure kind per window: the first logged, repeats counted, not written."""

from __future__ import annotations

import logging

import pytest

from monitor.core.throttled_log import ThrottledExceptionLog


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _fail(exc: Exception) -> Exception:
    try:
        raise exc
    except Exception as caught:
        return caught


def test_one_traceback_per_kind_per_window(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    logger = logging.getLogger("tests.throttled")
    throttled = ThrottledExceptionLog(logger, window_s=60.0, clock=clock)
    with caplog.at_level(logging.ERROR, logger="tests.throttled"):
        assert throttled.exception("could not parse", _fail(ValueError("a")))
        for _ in range(500):
            assert not throttled.exception("could not parse", _fail(ValueError("b")))
        # another kind has its own budget
        assert throttled.exception("could not parse", _fail(KeyError("c")))
        clock.t += 59.9
        assert not throttled.exception("could not parse", _fail(ValueError("d")))
        clock.t += 0.2
        assert throttled.exception("could not parse", _fail(ValueError("e")))
    records = [r for r in caplog.records if r.name == "tests.throttled"]
    assert len(records) == 3
    assert [r.exc_info[0] for r in records if r.exc_info] == [ValueError, KeyError, ValueError]
    assert records[0].getMessage() == "could not parse"
    # the 500 + 1 held back are reported by the next line of their kind
    assert records[2].getMessage() == "could not parse (501 more like it since the last line)"
    assert "ValueError: e" in caplog.text and "ValueError: b" not in caplog.text
