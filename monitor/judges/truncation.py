"""The cap on events judged per conversation (pure): which events are kept, and the summary of
the ones left out.

A conversation longer than ``max_events`` is judged on its first ``head`` and its last ``tail``
events (``head + tail = max_events``, the head taking the odd one) in the store's order (``ts``,
then ``event_id``); the events between them are not loaded, only summarised (:class:`Omitted`:
how many, their time span, their count per type and the tool results in them by tool name and
outcome). Every verdict on such a conversation carries the summary's :meth:`~Omitted.details`
under ``evidence["truncated"]``: exactly which events were left out (those strictly between
``omitted_after`` and ``resume_at`` in that order) and what they were.

What the judges do with the gap:

- a claim after it is backed by a successful call of a matching tool inside it (the summary
  keeps the names of the :data:`MAX_TOOL_NAMES` most frequent tools);
- a figure after it that no kept source supports is *unverified* (its source may be in the
  gap), not unsupported;
- a repeat of a call made only inside the gap, or a failure inside it, is not seen.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitor.contract.events import AgentEvent

#: the default cap (setting ``judge_max_events``, ``MONITOR_JUDGE_MAX_EVENTS``)
DEFAULT_MAX_EVENTS = 2000
#: tool names kept in a summary (the most frequent; the others are only counted)
MAX_TOOL_NAMES = 100
#: tool names a verdict's ``evidence["truncated"]`` lists per outcome (the totals count all)
EVIDENCE_TOOL_NAMES = 10


def split(total: int, max_events: int) -> tuple[int, int]:
    """``(head, tail)``: how many of ``total`` events are judged from the start and from the
    end; ``(total, 0)`` when ``total`` is within ``max_events``."""
    if max_events < 2:
        raise ValueError(f"max_events must be at least 2, got {max_events}")
    if total <= max_events:
        return total, 0
    tail = max_events // 2
    return max_events - tail, tail


@dataclass(frozen=True, slots=True)
class Omitted:
    """The events of a conversation left out of judging by the cap, summarised.

    ``after`` is the event id of the last kept event before the gap, ``resume_at`` the one of
    the first kept event after it. ``tool_successes`` / ``tool_failures``: tool results in the
    gap per tool name (the :data:`MAX_TOOL_NAMES` most frequent names); ``failed_results``:
    how many of the gap's tool results failed (all names).
    """

    events: int
    total: int
    max_events: int
    resume_at: str
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    by_type: Mapping[str, int] = field(default_factory=dict)
    tool_successes: Mapping[str, int] = field(default_factory=dict)
    tool_failures: Mapping[str, int] = field(default_factory=dict)
    after: str = ""
    failed_results: int = 0

    def details(self) -> dict[str, Any]:
        """What a verdict states about the cap (JSON-ready, bounded): ``events`` stored when
        judged, ``judged`` and ``omitted`` of them; the omitted ones are those strictly between
        ``omitted_after`` and ``resume_at`` (store order: ts, then event id), from
        ``omitted_from`` to ``omitted_to``, counted per type, and their tool results per
        outcome (totals, and the :data:`EVIDENCE_TOOL_NAMES` most frequent tool names)."""
        results = self.by_type.get("tool_result", 0)
        return {
            "max_events": self.max_events,
            "events": self.total,
            "judged": self.total - self.events,
            "omitted": self.events,
            "omitted_after": self.after,
            "resume_at": self.resume_at,
            "omitted_from": self.first_ts.isoformat() if self.first_ts else None,
            "omitted_to": self.last_ts.isoformat() if self.last_ts else None,
            "omitted_by_type": dict(self.by_type),
            "omitted_tool_results": {
                "ok": results - self.failed_results,
                "failed": self.failed_results,
                "ok_by_tool": _first(self.tool_successes, EVIDENCE_TOOL_NAMES),
                "failed_by_tool": _first(self.tool_failures, EVIDENCE_TOOL_NAMES),
            },
        }


def _first(counts: Mapping[str, int], n: int) -> dict[str, int]:
    """The ``n`` largest of ``counts`` (ties by name), largest first."""
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n])


def _top(counts: Counter[str]) -> dict[str, int]:
    return dict(counts.most_common(MAX_TOOL_NAMES))


def summarise(
    omitted: Sequence[AgentEvent], total: int, max_events: int, resume_at: str, after: str = ""
) -> Omitted:
    """The :class:`Omitted` of the events ``omitted`` between the kept events ``after`` and
    ``resume_at`` (what the store computes in SQL for a conversation it does not load; this is
    the same for events already in memory)."""
    ok: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for e in omitted:
        if e.tool_result is not None:
            (ok if e.tool_result.ok else failed)[e.tool_result.name] += 1
    return Omitted(
        events=len(omitted),
        total=total,
        max_events=max_events,
        resume_at=resume_at,
        first_ts=min((e.ts for e in omitted), default=None),
        last_ts=max((e.ts for e in omitted), default=None),
        by_type=dict(Counter(e.type for e in omitted)),
        tool_successes=_top(ok),
        tool_failures=_top(failed),
        after=after,
        failed_results=sum(failed.values()),
    )
