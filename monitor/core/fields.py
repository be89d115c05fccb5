"""Shorthands for the commonest kinds of settings field (pydantic ``Field``), so that a
declaration says its kind in one word and its meaning in its description.

``positive(default, description)``
    a number that must be above 0 (durations, intervals);
``non_negative(default, description)``
    a number that may be 0 (where 0 means off, none or forever, as its description says);
``unset(description)``
    ``None`` unless configured (what ``None`` means, its description says);
``secret(description)``
    like ``unset``, and a secret: left out of the settings' repr and masked wherever settings
    are shown (``monitor config``); ``secret_field(**kwargs)`` marks any other ``Field`` so.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic.fields import FieldInfo

SECRET = "secret"  # the json_schema_extra key that marks a secret field


def positive(default: float, description: str) -> Any:
    """A field above 0, ``default`` unless configured."""
    return Field(default=default, gt=0, description=description)


def non_negative(default: float, description: str) -> Any:
    """A field at or above 0, ``default`` unless configured."""
    return Field(default=default, ge=0, description=description)


def unset(description: str) -> Any:
    """A field that is ``None`` unless configured."""
    return Field(default=None, description=description)


def secret(description: str) -> Any:
    """A secret field (token, key, URL with a credential) that is ``None`` unless configured."""
    return secret_field(default=None, description=description)


def secret_field(**kwargs: Any) -> Any:
    """``Field(**kwargs)`` marked secret: no repr, masked where settings are shown."""
    return Field(repr=False, json_schema_extra={SECRET: True}, **kwargs)


def is_secret(field: FieldInfo) -> bool:
    """Whether ``field`` holds a secret: marked by :func:`secret` / :func:`secret_field`, or
    typed ``SecretStr`` / ``SecretBytes``."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and extra.get(SECRET) is True:
        return True
    return "Secret" in repr(field.annotation)
