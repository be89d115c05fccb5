"""What the scripted loopback servers in this package have in common."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Status:
    """Answer with this HTTP status, raw body and headers (e.g. 429 with Retry-After, 500)."""

    status: int
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
