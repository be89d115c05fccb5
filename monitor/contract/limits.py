"""What the store can hold, checked at the contract (pure: no I/O library).

Every input (Kafka record, HTTP body, replay line) is parsed by ONE JSON parser,
:func:`parse_json` (pydantic-core, depth limit :data:`MAX_JSON_DEPTH`), and every decoded event
passes :func:`check_storable` before it is accepted, so HTTP and Kafka answer the same and an
accepted event can always be written:

- ``invalid_character``: a string (value or object key, at any depth, attributes included)
  holds U+0000 (Postgres ``text`` and ``jsonb`` cannot store it) or a lone surrogate (not
  encodable as UTF-8);
- ``out_of_range``: an integer column (``turn``, ``context.trial``) outside the signed 32-bit
  range, or a timestamp outside :data:`MIN_TS` .. :data:`MAX_TS` once converted to UTC (the
  detail names the bound);
- ``invalid_value`` (``string_too_long``): a label the store indexes (``agent.version``,
  ``agent.model``, ``context.domain`` / ``channel`` / ``intent`` / ``segment`` / ``task_id``)
  longer than :data:`MAX_LABEL_CHARS` characters; ids (``event_id``, ``conversation_id``,
  ``agent.id``) are at most 128. A Postgres btree entry holds at most 2704 bytes; the widest
  key (``calibration_bins`` and ``escalation_bins``: agent id, version and domain together)
  then takes at most 128 x 4 + 2 x 256 x 4 = 2560 bytes of UTF-8, so an accepted event always
  fits its indexes;
- ``too_deep``: JSON nested deeper than :data:`MAX_JSON_DEPTH` levels (an HTTP array body is
  counted from its elements, so the same event gets the same answer both ways);
- ``future_timestamp``: ``ts`` more than the receiver's ``max_future_skew`` ahead of its clock
  (checked only when the caller passes ``now``; the worker and HTTP ingest do).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_core import from_json

from monitor.core.errors import InvalidEvent

MAX_JSON_DEPTH = 64
#: the longest label (agent version and model, context strings) in characters: see above
MAX_LABEL_CHARS = 256
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MIN_TS = datetime(1, 1, 2, tzinfo=UTC)
MAX_TS = datetime(9999, 12, 30, tzinfo=UTC)


def parse_json(data: bytes | str, *, check_depth: bool = True) -> Any:
    """Parse ``data`` with the monitor's single JSON parser.

    Raises ``InvalidEvent`` ``not_json`` (undecodable, invalid UTF-8, lone surrogate escapes,
    trailing data) or ``too_deep`` (deeper than :data:`MAX_JSON_DEPTH`; always beyond the
    parser's own limit of about 200 levels). ``check_depth=False`` leaves the depth check to
    the caller: an HTTP array body checks each element with :func:`check_depth`, so each event
    is counted from its own root, as on Kafka.
    """
    try:
        obj = from_json(data)
    except (UnicodeDecodeError, ValueError) as exc:
        if "recursion limit" in str(exc):
            raise _too_deep() from None
        raise InvalidEvent("not_json", None, f"not valid UTF-8 JSON: {exc}") from None
    raw = data.encode(errors="surrogatepass") if isinstance(data, str) else data
    # fewer brackets than the limit cannot nest deeper: skip the walk
    if check_depth and raw.count(b"{") + raw.count(b"[") > MAX_JSON_DEPTH:
        check_json_depth(obj)
    return obj


def may_hold_nul(data: bytes) -> bool:
    """False when the JSON text ``data`` cannot decode to a string holding U+0000: the parser
    rejects raw control characters, so a NUL can only come from a ``\\u0000`` escape (lone
    surrogates are rejected by the parser itself). A cheap pre-check before the full walk."""
    return b"\\u0000" in data


def check_json_depth(obj: Any) -> None:
    """Raise ``too_deep`` when ``obj`` nests deeper than :data:`MAX_JSON_DEPTH`."""
    if _depth_exceeds(obj, MAX_JSON_DEPTH):
        raise _too_deep()


def _too_deep() -> InvalidEvent:
    return InvalidEvent("too_deep", None, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")


def _depth_exceeds(obj: Any, limit: int) -> bool:
    """True when ``obj`` nests containers deeper than ``limit`` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def check_characters(obj: Any) -> None:
    """Raise ``invalid_character`` when any string or key in ``obj`` cannot be stored."""
    if _storable(obj):
        return
    stack: list[tuple[Any, str]] = [(obj, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            _check_string(value, path)
        elif isinstance(value, dict):
            for key, child in value.items():
                shown = printable(str(key))
                where = f"{path}.{shown}" if path else shown
                if isinstance(key, str):
                    _check_string(key, where)
                stack.append((child, where))
        elif isinstance(value, list):
            stack.extend((child, f"{path}.{i}") for i, child in enumerate(value))


def _storable(obj: Any) -> bool:
    """True when no string or key in ``obj`` holds U+0000 or a lone surrogate: the walk of
    :func:`check_characters` without the paths it names, several times faster. False when one
    may (a subclass of ``str``, ``dict`` or ``list``): the full walk decides and names the path.
    An ASCII string (``isascii`` is O(1)) cannot hold a surrogate, so only the others are
    encoded."""
    stack = [obj]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is str:
            if "\x00" in value or not (value.isascii() or _encodes(value)):
                return False
        elif kind is dict:
            for key, child in value.items():
                if type(key) is str:
                    if "\x00" in key or not (key.isascii() or _encodes(key)):
                        return False
                elif isinstance(key, str):
                    return False
                stack.append(child)
        elif kind is list:
            stack.extend(value)
        elif isinstance(value, (str, dict, list)):
            return False
    return True


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(text: str) -> str:
    """``text`` with U+0000 and lone surrogates written as JSON-style escapes (U+0000 becomes
    the six characters backslash, u, 0, 0, 0, 0): storable in Postgres text."""
    if "\x00" not in text:
        try:
            text.encode("utf-8")
            return text
        except UnicodeEncodeError:
            pass
    return "".join(
        f"\\u{ord(ch):04x}" if ch == "\x00" or 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text
    )


def _check_string(text: str, path: str) -> None:
    if "\x00" in text:
        raise InvalidEvent(
            "invalid_character",
            path or None,
            f"{path or 'event'}: contains U+0000 (NUL), which the store cannot hold",
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidEvent(
            "invalid_character", path or None, f"{path or 'event'}: contains a lone surrogate"
        ) from None


def check_timestamp(ts: datetime) -> None:
    """Raise ``out_of_range`` (naming the bounds) when ``ts`` in UTC is outside the range."""
    try:
        utc = ts.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not MIN_TS <= utc <= MAX_TS:
        raise InvalidEvent(
            "out_of_range",
            "ts",
            f"ts: must be between {MIN_TS.isoformat()} and "
            f"{MAX_TS.isoformat()} in UTC, got {ts.isoformat()}",
        )


def check_future(ts: datetime, now: datetime, max_skew: timedelta) -> None:
    """Raise ``future_timestamp`` when ``ts`` is more than ``max_skew`` after ``now``."""
    if ts - now > max_skew:
        raise InvalidEvent(
            "future_timestamp",
            "ts",
            f"ts: {ts.isoformat()} is more than "
            f"{max_skew.total_seconds():g} s after the receiver's clock ({now.isoformat()})",
        )
