"""Bounded evidence lists (pure): what a verdict cites, however long the conversation.

A verdict's evidence names the items it rests on (the earlier tool calls that back a claim, the
failed calls a message ignores). On a long conversation those lists would grow with every
earlier event, and a list per message makes the judge quadratic in time and memory. A
:class:`Bounded` keeps the first ``keep`` and the last ``keep`` items added and counts all of
them: its :meth:`~Bounded.items` cite at most ``2 * keep``, and :meth:`~Bounded.cite` writes
the total next to them when some were left out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: items kept at each end of an evidence list (at most twice this many are cited)
EVIDENCE_KEEP = 5


class Bounded(Generic[T]):
    """The first and last ``keep`` items added, and how many were added (O(keep) memory)."""

    __slots__ = ("_first", "_last", "count", "keep")

    def __init__(self, keep: int = EVIDENCE_KEEP, items: Iterable[T] = ()) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.keep = keep
        self.count = 0
        self._first: list[T] = []
        self._last: deque[T] = deque(maxlen=keep)
        for item in items:
            self.append(item)

    def append(self, item: T) -> None:
        self.count += 1
        if len(self._first) < self.keep:
            self._first.append(item)
        else:
            self._last.append(item)

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    @property
    def cut(self) -> bool:
        """True when items were left out (more than ``2 * keep`` added)."""
        return self.count > len(self._first) + len(self._last)

    def items(self) -> list[T]:
        """The kept items in the order they were added: all of them when at most ``2 * keep``
        were added, else the first ``keep`` and the last ``keep``."""
        return [*self._first, *self._last]

    def cite(self, key: str, evidence: dict[str, Any]) -> dict[str, Any]:
        """``evidence`` with ``key`` = :meth:`items`, and ``<key>_total`` = the count when
        items were left out (so a reader sees the list is a sample)."""
        evidence[key] = self.items()
        if self.cut:
            evidence[f"{key}_total"] = self.count
        return evidence
