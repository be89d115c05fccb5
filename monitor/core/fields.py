"""Shorthands for the commonest kinds of settings field (pydantic ``Field``), so that a
declaration says its kind in one word and its meaning in its description.

``positive(default, description)``
    a number that must be above 0 (durations, intervals);
``non_negative(default, description)``
    a number that may be 0 (where 0 means off, none or forever, as its description says);
``unset(description)``
    ``None`` unless configured (what ``None`` means, its description says).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field


def positive(default: float, description: str) -> Any:
    """A field above 0, ``default`` unless configured."""
    return Field(default=default, gt=0, description=description)


def non_negative(default: float, description: str) -> Any:
    """A field at or above 0, ``default`` unless configured."""
    return Field(default=default, ge=0, description=description)


def unset(description: str) -> Any:
    """A field that is ``None`` unless configured."""
    return Field(default=None, description=description)
