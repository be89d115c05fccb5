"""Duration strings of the alert rules file (``30s``, ``5m``, ``1h30m``, ``1d``) <-> timedelta.

Pure. Grammar: one or more ``<number><unit>`` parts with no spaces, units ``ms s m h d w``
(``m`` is minutes), numbers non-negative decimals; the bare string or number ``0`` is zero.
Other bare numbers are rejected on purpose: ``window: 5`` is ambiguous (seconds? minutes?).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+")
_HINT = "a duration like 30s, 5m, 1h30m or 1d (units ms, s, m, h, d, w)"


def parse_duration(text: str) -> timedelta:
    """Parse a duration string into a timedelta (resolution: milliseconds).

    Raises ValueError (message names the accepted grammar) for anything else, including
    negative values, spaces inside, and unit-less numbers other than ``0``.
    """
    s = text.strip()
    if s == "0":
        return timedelta(0)
    if not _WHOLE.fullmatch(s):
        raise ValueError(f"{text!r} is not {_HINT}")
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(s))
    return timedelta(milliseconds=round(seconds * 1000))


def format_duration(value: timedelta) -> str:
    """The shortest canonical string for a non-negative timedelta (``0s``, ``1h30m``, ``1d``).

    ``parse_duration(format_duration(d)) == d`` for every ``d`` with millisecond resolution.
    Raises ValueError for a negative duration.
    """
    ms = round(value.total_seconds() * 1000)
    if ms < 0:
        raise ValueError(f"negative duration {value}")
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    if ms:
        parts.append(f"{ms}ms")
    return "".join(parts)


def _coerce(value: object) -> object:
    """Pydantic before-validator: strings are parsed, ``0`` is zero, timedeltas pass through."""
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return timedelta(0)
    if isinstance(value, timedelta):
        return value
    raise ValueError(f"expected {_HINT}, got {value!r}")


Duration = Annotated[
    timedelta,
    BeforeValidator(_coerce),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]
"""A pydantic field type: accepts duration strings, dumps to the canonical string in JSON mode."""
