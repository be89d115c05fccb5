"""One conversation as a person reads it: its events in order, its verdicts, its gate decisions
and its sampling decision, with customer content and secrets redacted (pure; no I/O).

:func:`build` takes what :mod:`monitor.judges.transcript_repo` reads (the conversation's
roll-up row, its stored event bodies with when each arrived, its verdict rows) and returns a
:class:`Transcript`:

- ``steps``: every event but the gate's, in stored order (``ts``, then turn, then event id):
  messages with role and confidence (and the tool calls they make), tool results with ``ok``
  and ``error``, escalations with trigger and turn, the outcome with its source and when it
  arrived, feedback. Each step's ``detail`` is its payload's fields as plain JSON values;
- ``verdicts``: each judge's verdict with its evidence, and the turn of the message it is on;
- ``gate``: the gate decisions (``POST /v1/gate``), with their findings;
- ``sample``: the sampling decision (stratum, rate, weight) and whether the conversation's
  events are kept or will be dropped with the unsampled window.

Every string that may carry customer content (message text, tool arguments and results,
errors, reasons, comments, judge rationales and evidence, gate critiques, event attributes)
goes through :func:`monitor.core.redact.redact`: secrets, card numbers, emails and phone
numbers are replaced, and a mapping value under a credential key (``password``, ``token``,
``api_key``, ...) is replaced whole. Ids, agent names, judge names and numbers other than
card numbers are shown as stored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitor.contract.events import AgentEvent, validate_event
from monitor.core.redact import redact


def redact_value(value: Any) -> Any:
    """``value`` (plain JSON: dicts, lists, strings, numbers) with every string redacted.

    A mapping value is redacted as ``key=value`` would be, so a credential under a key that
    names it (``{"password": "hunter2"}``) is replaced; an integer that reads as a card number
    becomes ``"[card]"``. Keys themselves are kept."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if redact(str(value)) == str(value) else "[card]"
    if isinstance(value, Mapping):
        return {str(k): _keyed(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return redact(str(value))


def _keyed(key: str, value: Any) -> Any:
    if isinstance(value, str):
        joined = redact(f"{key}={value}")
        prefix = f"{key}="
        return joined[len(prefix) :] if joined.startswith(prefix) else redact(value)
    return redact_value(value)


@dataclass(frozen=True)
class StoredEvent:
    """One stored event as read: its JSON body and when the worker wrote it (``arrived``)."""

    body: str | Mapping[str, Any]
    arrived: datetime


@dataclass(frozen=True)
class Step:
    """One event of the conversation. ``kind`` is the event type; ``detail`` its payload's
    fields (redacted, None fields left out); ``attributes`` the event's attributes (redacted)."""

    event_id: str
    kind: str
    at: datetime
    arrived: datetime
    turn: int | None
    detail: Mapping[str, Any]
    attributes: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "type": self.kind,
            "ts": self.at.isoformat(),
            "arrived": self.arrived.isoformat(),
            "turn": self.turn,
            **{self.kind: dict(self.detail)},
            "attributes": None if self.attributes is None else dict(self.attributes),
        }


@dataclass(frozen=True)
class VerdictView:
    """One stored verdict: on the message ``item_id`` (at ``turn``) or on the whole
    conversation (``item_id`` None); ``evidence`` and ``rationale`` redacted."""

    judge: str
    judge_version: str
    item_id: str | None
    turn: int | None
    status: str
    label: int | None
    score: float | None
    categories: tuple[str, ...]
    evidence: Mapping[str, Any]
    rationale: str | None
    error: str | None
    created_at: datetime

    @property
    def flagged(self) -> bool:
        """The judge said the message (or conversation) was wrong."""
        return self.status == "ok" and self.label == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "judge": self.judge,
            "judge_version": self.judge_version,
            "item_id": self.item_id,
            "turn": self.turn,
            "status": self.status,
            "label": self.label,
            "score": self.score,
            "categories": list(self.categories),
            "evidence": dict(self.evidence),
            "rationale": self.rationale,
            "error": self.error,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True)
class SampleView:
    """The conversation's sampling decision and what it means for its events.

    ``decided`` False: the writer has not decided yet. ``kept_events`` of ``events`` stored
    events are in the kept sample; the others go when the unsampled window ends."""

    decided: bool
    stratum: str | None
    rate: float | None
    sampled_by_rate: bool | None
    weight: float | None
    policy: str | None
    events: int
    kept_events: int
    judge_requested_at: datetime | None

    @property
    def kept(self) -> bool:
        """Every stored event of the conversation is in the kept sample."""
        return self.events > 0 and self.kept_events == self.events

    def describe(self) -> str:
        """One line: kept or unsampled, why, and its weight in the metrics."""
        if not self.decided:
            return "not decided yet"
        state = "kept" if self.kept else "unsampled"
        if self.kept and not self.sampled_by_rate:
            state += " (pulled into the sample by an always-sample rule)"
        elif not self.kept and self.kept_events:
            state += f" ({self.kept_events} of {self.events} events kept)"
        rate = "-" if self.rate is None else f"{self.rate:g}"
        weight = "-" if self.weight is None else f"{self.weight:g}"
        return (
            f"{state}; stratum {self.stratum}, rate {rate}, "
            f"{'sampled' if self.sampled_by_rate else 'not sampled'} by rate, weight {weight}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "decided": self.decided,
            "kept": self.kept,
            "stratum": self.stratum,
            "rate": self.rate,
            "sampled_by_rate": self.sampled_by_rate,
            "weight": self.weight,
            "policy": self.policy,
            "events": self.events,
            "kept_events": self.kept_events,
            "judge_requested_at": _iso(self.judge_requested_at),
            "summary": self.describe(),
        }


@dataclass(frozen=True)
class Transcript:
    """One conversation as :func:`build` shows it (module docstring)."""

    conversation_id: str
    rollup: Mapping[str, Any]
    steps: tuple[Step, ...]
    verdicts: tuple[VerdictView, ...]
    gate: tuple[Step, ...]
    sample: SampleView
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def outcome(self) -> Step | None:
        """The last outcome event (a later one supersedes an earlier one), else None."""
        return next((s for s in reversed(self.steps) if s.kind == "outcome"), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "conversation": {k: _plain(v) for k, v in self.rollup.items()},
            "events": [s.to_dict() for s in self.steps],
            "verdicts": [v.to_dict() for v in self.verdicts],
            "gate_decisions": [s.to_dict() for s in self.gate],
            "sample": self.sample.to_dict(),
            "notes": list(self.notes),
            "redacted": True,
        }


#: columns of the conversation's row that :class:`SampleView` shows (not in ``rollup``)
SAMPLE_COLUMNS = frozenset(
    {"sample_stratum", "sample_rate", "sampled_by_rate", "sample_weight", "sample_policy"}
)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _event(body: str | Mapping[str, Any]) -> AgentEvent:
    return validate_event(json.loads(body) if isinstance(body, str) else dict(body))


def step_of(event: AgentEvent, arrived: datetime) -> Step:
    """The :class:`Step` of one event (its payload and attributes redacted)."""
    payload = event.payload.model_dump(mode="json", exclude_none=True)
    return Step(
        event.event_id,
        event.type,
        event.ts,
        arrived,
        event.turn,
        redact_value(payload),
        None if event.attributes is None else redact_value(event.attributes),
    )


def _verdict(row: Mapping[str, Any], turns: Mapping[str, int | None]) -> VerdictView:
    item = row.get("item_id") or None
    evidence = row.get("evidence") or {}
    if isinstance(evidence, str):
        evidence = json.loads(evidence)
    categories = row.get("categories") or []
    if isinstance(categories, str):
        categories = json.loads(categories)
    rationale, error = row.get("rationale"), row.get("error")
    return VerdictView(
        str(row["judge"]),
        str(row["judge_version"]),
        item,
        turns.get(item) if item else None,
        str(row["status"]),
        None if row.get("label") is None else int(row["label"]),
        None if row.get("score") is None else float(row["score"]),
        tuple(str(c) for c in categories),
        redact_value(evidence if isinstance(evidence, Mapping) else {"evidence": evidence}),
        None if rationale is None else redact(str(rationale)),
        None if error is None else redact(str(error)),
        row["created_at"],
    )


def build(
    conversation_id: str,
    rollup: Mapping[str, Any],
    events: Sequence[StoredEvent],
    verdicts: Sequence[Mapping[str, Any]],
    kept_events: int,
) -> Transcript:
    """The transcript of one conversation from its stored rows (module docstring).

    ``rollup`` is its ``conversations`` row (a mapping of column -> value), ``events`` its
    stored events in order, ``verdicts`` its ``verdicts`` rows, ``kept_events`` how many of its
    stored events are in the kept sample. Raises pydantic's ValidationError (a ValueError) on a
    stored body that is not an agent-event/v1 event."""
    steps: list[Step] = []
    gate: list[Step] = []
    for stored in events:
        step = step_of(_event(stored.body), stored.arrived)
        (gate if step.kind == "gate" else steps).append(step)
    turns = {s.event_id: s.turn for s in (*steps, *gate)}
    sample = SampleView(
        decided=rollup.get("sample_rate") is not None,
        stratum=rollup.get("sample_stratum"),
        rate=rollup.get("sample_rate"),
        sampled_by_rate=rollup.get("sampled_by_rate"),
        weight=rollup.get("sample_weight"),
        policy=rollup.get("sample_policy"),
        events=len(events),
        kept_events=kept_events,
        judge_requested_at=rollup.get("judge_requested_at"),
    )
    notes = []
    stored_count = rollup.get("event_count")
    if isinstance(stored_count, int) and stored_count > len(events):
        notes.append(
            f"{stored_count - len(events)} of its {stored_count} events are no longer stored "
            "(outside the sample after the unsampled window, or past retention)"
        )
    return Transcript(
        conversation_id,
        {k: v for k, v in rollup.items() if k not in SAMPLE_COLUMNS and k != "conversation_id"},
        tuple(steps),
        tuple(_verdict(v, turns) for v in verdicts),
        tuple(gate),
        sample,
        tuple(notes),
    )


# --- the words a person reads (plain text; the CLI and the report style and escape them) ---

#: longest text shown of one message or tool result (``--json`` has everything)
CONTENT_CHARS = 2000
#: longest text shown of arguments, reasons, comments, errors, rationales, evidence
SHORT_CHARS = 600


def cut(text: str, most: int = CONTENT_CHARS) -> str:
    """``text``, cut after ``most`` characters with a note of how many more there were."""
    return text if len(text) <= most else text[:most] + f" ... ({len(text) - most} more chars)"


def compact(value: Any) -> str:
    """A JSON value on one line."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.2f}"


def step_text(step: Step) -> tuple[str, str]:
    """``(who, what)`` of one step, plain text: who acted (role and stated confidence, tool ok
    or FAILED, escalation, outcome, feedback) and what was said or done (the message and the
    tool calls it makes as ``-> name(arguments)``, the tool's error and result, the trigger,
    turn and reason of an escalation, the outcome's source, reward and arrival, the
    feedback's score, source and comment)."""
    d: Mapping[str, Any] = step.detail
    if step.kind == "message":
        who = str(d.get("role", "?"))
        if d.get("confidence") is not None:
            who += f" {_num(d['confidence'])}"
        text = str(d.get("content") or "").strip()
        lines = [cut(text)] if text else []
        for call in d.get("tool_calls", []):
            args = cut(compact(call.get("arguments", {})), SHORT_CHARS)
            lines.append(f"-> {call.get('name')}({args})")
        return who, "\n".join(lines) or "(no text)"
    if step.kind == "tool_result":
        what = str(d.get("name"))
        error = str(d.get("error") or "").strip()
        if error:
            what += f" error: {cut(error, SHORT_CHARS)}"
        content = str(d.get("content") or "").strip()
        if content and content != error:
            what += f"\n{cut(content)}"
        return f"tool {'ok' if d.get('ok') else 'FAILED'}", what
    if step.kind == "escalation":
        what = f"escalated (trigger {d.get('trigger')}"
        what += f", turn {step.turn})" if step.turn is not None else ")"
        if d.get("confidence") is not None:
            what += f" at confidence {_num(d['confidence'])}"
        if d.get("reason"):
            what += f": {cut(str(d['reason']), SHORT_CHARS)}"
        return "escalation", what
    if step.kind == "outcome":
        what = f"{'succeeded' if d.get('success') else 'failed'}, source {d.get('source')}"
        if d.get("reward") is not None:
            what += f", reward {_num(d['reward'])}"
        return "outcome", what + f"; arrived {step.arrived:%Y-%m-%d %H:%M:%S}"
    if step.kind == "feedback":
        what = f"score {_num(d.get('score'))} from {d.get('source')}"
        if d.get("comment"):
            what += f": {cut(str(d['comment']), SHORT_CHARS)}"
        return "feedback", what
    if step.kind == "gate":
        return "gate", gate_text(step)
    return step.kind, cut(compact(dict(d)), SHORT_CHARS)


def gate_text(step: Step) -> str:
    """A gate decision: the decision (shadow or not), stated and calibrated confidence against
    the threshold and its source, a degraded answer's reason, one line per finding."""
    d = step.detail
    shadow = "" if d.get("enforced", True) else " (shadow)"
    what = (
        f"{d.get('decision')}{shadow}: confidence {_num(d.get('confidence'))}, calibrated "
        f"{_num(d.get('calibrated'))}, threshold {_num(d.get('threshold'))} "
        f"({d.get('threshold_source')})"
    )
    if d.get("degraded"):
        what += f"; degraded: {d['degraded']}"
    for f in d.get("findings", []):
        category = f" {f['category']}" if f.get("category") else ""
        what += f"\n{f.get('judge')}{category}: {f.get('critique', '')}"
    return what


def by_turn(value: Any, turns: Mapping[str, int | None]) -> Any:
    """``value`` with every string that is an event id of the conversation shown as
    ``turn N`` (evidence cites events by id; a person reads turns)."""
    if isinstance(value, str):
        turn = turns.get(value, -1)
        return value if turn == -1 else f"turn {turn}" if turn is not None else "(no turn)"
    if isinstance(value, Mapping):
        return {k: by_turn(v, turns) for k, v in value.items()}
    if isinstance(value, list):
        return [by_turn(v, turns) for v in value]
    return value


def verdict_text(v: VerdictView, turns: Mapping[str, int | None]) -> str:
    """What the verdict said (wrong / right / no opinion, score, categories, or the judge's
    error), its rationale and its evidence (event ids shown as turns), one per line."""
    if v.status != "ok":
        lines = [f"error: {v.error or '?'}"]
    else:
        said = "wrong" if v.label == 0 else "right" if v.label == 1 else "no opinion"
        if v.score is not None:
            said += f", score {_num(v.score)}"
        if v.categories:
            said += f", {', '.join(v.categories)}"
        lines = [said]
    if v.rationale:
        lines.append(cut(v.rationale, SHORT_CHARS))
    if v.evidence:
        lines.append(f"evidence {cut(compact(by_turn(dict(v.evidence), turns)), SHORT_CHARS)}")
    return "\n".join(lines)


def turns_of(tr: Transcript) -> dict[str, int | None]:
    """Event id -> turn, for every stored event of the conversation."""
    return {s.event_id: s.turn for s in (*tr.steps, *tr.gate)}
