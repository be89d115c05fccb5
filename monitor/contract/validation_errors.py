"""Mapping pydantic validation errors to the contract's ``InvalidEvent`` reasons (pure)."""

from __future__ import annotations

from typing import Any

_REASONS = {
    "missing": "missing_field",
    "extra_forbidden": "unknown_field",
    "literal_error": "invalid_value",
    "greater_than_equal": "out_of_range",
    "less_than_equal": "out_of_range",
    "greater_than": "out_of_range",
    "less_than": "out_of_range",
    "string_too_short": "invalid_value",
    "string_too_long": "invalid_value",
    "timezone_aware": "invalid_value",
}


def reason_for(
    err: Any, event_types: tuple[str, ...], schema_id: str
) -> tuple[str, str | None, str]:
    """``(reason, field, detail)`` of the first pydantic validation error ``err``."""
    loc = ".".join(str(p) for p in err["loc"]) or None
    kind = str(err["type"])
    msg = str(err["msg"])
    if kind == "value_error":
        # our own validators put the code before the first colon
        text = msg.removeprefix("Value error, ")
        code, _, rest = text.partition(": ")
        return code, loc, rest or text
    if loc == "type" and kind == "literal_error":
        return "unknown_type", loc, f"type must be one of {', '.join(event_types)}"
    if loc == "schema" and kind == "literal_error":
        return "bad_schema", loc, f'schema must be exactly "{schema_id}"'
    reason = _REASONS.get(kind, "wrong_type" if kind.endswith("_type") else "invalid_value")
    return reason, loc, f"{loc or 'event'}: {msg}"
