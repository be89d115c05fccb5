"""Exemplars: the conversations that show a firing alert, and the rule that picks them. Pure.

When an alert fires, the evaluator stores up to N exemplars of the episode (the
``alert_exemplars`` setting, default :data:`DEFAULT_LIMIT`): :mod:`monitor.alerts.exemplar_repo`
reads the candidates by the rule of the alert's metric (:func:`pick_for`, each rule stated in one
sentence in :data:`PICK_RULES` and in docs/runbooks.md, "Exemplars"), this module ranks them and
writes each one's reason, and the repo stores them and promotes their conversations into the kept
sample in the same transaction. Notifications, ``monitor alerts show`` and the Conversation
dashboard link show them.

An :class:`Exemplar` is a conversation id (None for an exemplar that is not a conversation: a
dead letter), a one-line ``reason`` (why it shows the problem, at most :data:`REASON_CHARS`
characters, whitespace collapsed) and ``detail``, the facts behind the reason (JSON-ready).
Reasons may quote a conversation: a reason is redacted (:func:`monitor.core.redact.redact`:
secrets, emails, phone numbers, card numbers) before it is cut to length, so a cut never leaves
part of one behind, and its detail's credentials are replaced before it is stored
(:meth:`Exemplar.without_secrets`); every output redacts again (notifications in the sinks, the
CLI).

In an outbox payload the exemplars of each member's episode sit at the top level (beside
``redact_customer_content``): ``"exemplars": {"<fingerprint>:<fired_at ISO>": [{"rank",
"conversation_id", "reason"}, ...]}`` (:func:`payload_exemplars` reads them); the sinks add the
link to the Conversation dashboard (:func:`conversation_link`) and the command
(:func:`conversation_command`).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urlencode

from monitor.alerts.metrics import CALIBRATION_METRICS, Metric
from monitor.analytics.bins import BinSums
from monitor.core.redact import redact, redact_secrets

DEFAULT_LIMIT = 3
"""Exemplars stored per alert episode unless the ``alert_exemplars`` setting says otherwise."""
REASON_CHARS = 200
"""The longest reason; a longer one is cut with an ellipsis."""
QUOTE_CHARS = 80
"""The longest excerpt of a message a reason quotes."""
DETAIL_CHARS = 4000
"""The longest JSON of a verdict's evidence a detail keeps (longer: its quote only)."""
CANDIDATES = 500
"""Candidates a pick rule reads at most, the latest of the rule's window first: what bounds the
cost of a long window (a day of an agent's replies) to the same as a short one's."""
MIN_BIN_ITEMS = 5.0
"""Effective items a confidence bin needs in each window before its accuracy counts as moved."""
CONVERSATION_DASHBOARD = "/d/monitor-conversation"
"""The Conversation dashboard's path in Grafana (uid ``monitor-conversation``)."""


class Pick(StrEnum):
    """The rule that picks the exemplars of a metric (:data:`PICK_RULES` states each one)."""

    FAILED_CONFIDENT = "failed_confident"
    DRIFT_BINS = "drift_bins"
    INVERSION = "inversion"
    SLOWEST = "slowest"
    JUDGE_FLAGGED = "judge_flagged"
    GATE_ESCALATED = "gate_escalated"
    GATE_PROCEEDED_FAILED = "gate_proceeded_failed"
    GATE_DEGRADED = "gate_degraded"
    GATE_FAIL_OPEN = "gate_fail_open"
    DEAD_LETTERS = "dead_letters"
    NONE = "none"


PICK_RULES: Mapping[Pick, str] = {
    Pick.FAILED_CONFIDENT: "the failed conversations with the highest stated confidence among "
    "the latest 500 failed replies of the rule's window (each with its most confident failed "
    "reply)",
    Pick.DRIFT_BINS: "the failed conversations of the latest fired drift check's recent window "
    "in the confidence bins whose accuracy fell most against the reference (largest "
    "two-proportion z first), most confident first among each bin's latest 500 failed replies; "
    "when no bin lost accuracy, the latest conversations of the bins whose share of the traffic "
    "grew most",
    Pick.INVERSION: "alternately, the escalated conversations with the highest minimum "
    "confidence and the failed, unescalated ones with the lowest, each among the latest 500 of "
    "its kind started in the rule's window",
    Pick.SLOWEST: "the escalated conversations that took longest from their first event to the "
    "escalation, among the latest 500 escalated conversations started in the rule's window",
    Pick.JUDGE_FLAGGED: "the conversations flagged with the rule's category among the latest "
    "500 flagged verdicts of the rule's window, latest verdict first, with the judge's rationale "
    "and evidence",
    Pick.GATE_ESCALATED: "the gate's escalate decisions in the rule's window, latest first",
    Pick.GATE_PROCEEDED_FAILED: "the failed conversations whose latest gate decision was "
    "proceed, among the latest 500 decisions of the rule's window, highest calibrated "
    "confidence first",
    Pick.GATE_DEGRADED: "the gate's degraded decisions (fail open or closed) in the rule's "
    "window, latest first",
    Pick.GATE_FAIL_OPEN: "the gate's enforced fail-open decisions in the rule's window, latest "
    "first",
    Pick.DEAD_LETTERS: "the latest dead letters of the rule's window with their reason (not "
    "conversations; the conversation a dead letter names, when its bytes parse)",
    Pick.NONE: "none: the signal is the pipeline's own state, which no stored conversation shows",
}

_PICKS: Mapping[Metric, Pick] = {
    **{m: Pick.FAILED_CONFIDENT for m in CALIBRATION_METRICS},
    Metric.DRIFT: Pick.DRIFT_BINS,
    Metric.ESCALATION_INVERSION: Pick.INVERSION,
    Metric.TIME_TO_ESCALATION_P90_S: Pick.SLOWEST,
    Metric.JUDGE_FAILURE_RATE: Pick.JUDGE_FLAGGED,
    Metric.GATE_ESCALATION_RATE: Pick.GATE_ESCALATED,
    Metric.GATE_PROCEEDED_FAILURE_RATE: Pick.GATE_PROCEEDED_FAILED,
    Metric.GATE_DEGRADED_RATE: Pick.GATE_DEGRADED,
    Metric.GATE_FAIL_OPEN_RATE: Pick.GATE_FAIL_OPEN,
    Metric.DLQ_RATE: Pick.DEAD_LETTERS,
    Metric.CONSUMER_LAG: Pick.NONE,
    Metric.INGEST_STALL_S: Pick.NONE,
}


def pick_for(metric: Metric) -> Pick:
    """The rule that picks the exemplars of an alert on ``metric``."""
    return _PICKS[metric]


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` on one line (every run of whitespace one space), cut to ``limit`` characters
    with a trailing ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def quoted(text: str | None, limit: int = QUOTE_CHARS) -> str:
    """``': "excerpt"'`` of a message (redacted, then one line of at most ``limit``
    characters), or ``""``."""
    flat = one_line(redact(text or ""), limit)
    return f': "{flat}"' if flat else ""


@dataclass(frozen=True)
class Exemplar:
    """One exemplar (module docstring). ``rank`` is 1-based once ranked (0 before); the
    ``reason`` given is redacted and put on one line of at most :data:`REASON_CHARS`."""

    conversation_id: str | None
    reason: str
    detail: Mapping[str, Any] = field(default_factory=dict, hash=False)
    rank: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", one_line(redact(self.reason)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``rank``, ``conversation_id``, ``reason``, ``detail``."""
        return {
            "rank": self.rank,
            "conversation_id": self.conversation_id,
            "reason": self.reason,
            "detail": dict(self.detail),
        }

    def without_secrets(self) -> Exemplar:
        """The same exemplar with every credential in its detail replaced
        (:func:`monitor.core.redact.redact_secrets`): what is stored."""
        return Exemplar(
            self.conversation_id, self.reason, _secret_free(dict(self.detail)), self.rank
        )

    def brief(self) -> dict[str, Any]:
        """What a notification carries: ``rank``, ``conversation_id``, ``reason``."""
        return {"rank": self.rank, "conversation_id": self.conversation_id, "reason": self.reason}


def _secret_free(value: Any) -> Any:
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, Mapping):
        return {k: _secret_free(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_secret_free(v) for v in value]
    return value


def ranked(candidates: Iterable[Exemplar], limit: int) -> list[Exemplar]:
    """The first ``limit`` candidates in order, one per conversation (an exemplar without a
    conversation is never a duplicate), ranked 1, 2, ..."""
    out: list[Exemplar] = []
    seen: set[str] = set()
    for c in candidates:
        if len(out) >= limit:
            break
        if c.conversation_id is not None:
            if c.conversation_id in seen:
                continue
            seen.add(c.conversation_id)
        out.append(Exemplar(c.conversation_id, c.reason, c.detail, len(out) + 1))
    return out


def alternate(first: Sequence[Exemplar], second: Sequence[Exemplar]) -> list[Exemplar]:
    """``first[0], second[0], first[1], second[1], ...``; the longer list's rest at the end."""
    out: list[Exemplar] = []
    for i in range(max(len(first), len(second))):
        out.extend(x[i] for x in (first, second) if i < len(x))
    return out


# --- drift: which confidence bins moved -------------------------------------------------------


@dataclass(frozen=True)
class BinMove:
    """One confidence bin ``[lower, upper)`` in a drift check's reference and recent windows:
    effective items, weighted accuracy and share of the window's weight in each; ``z`` the
    two-proportion z of the accuracy's fall (positive: fell), None without enough items."""

    bin: int
    lower: float
    upper: float
    n_reference: float
    n_recent: float
    accuracy_reference: float | None
    accuracy_recent: float | None
    share_reference: float
    share_recent: float
    z: float | None

    def label(self) -> str:
        """``0.8-0.9``."""
        return f"{self.lower:.1f}-{self.upper:.1f}"


def _per_bin(s: BinSums) -> tuple[list[float], list[float], list[float | None]]:
    """(effective items, weight share, weighted accuracy) per bin."""
    w = [float(x) for x in s.weight]
    y = [float(x) for x in s.sum_y]
    total = sum(w)
    n_eff = [float(x) for x in s.n_eff()]
    share = [wi / total if total > 0 else 0.0 for wi in w]
    acc = [yi / wi if wi > 0 else None for yi, wi in zip(y, w, strict=True)]
    return n_eff, share, acc


def bin_moves(
    reference: BinSums, recent: BinSums, min_items: float = MIN_BIN_ITEMS
) -> list[BinMove]:
    """Every bin of the two windows' sums (same number of bins), in bin order."""
    if reference.n_bins != recent.n_bins:
        raise ValueError("the two windows must have the same bins")
    n_ref, sh_ref, acc_ref = _per_bin(reference)
    n_rec, sh_rec, acc_rec = _per_bin(recent)
    k = reference.n_bins
    out = []
    for b in range(k):
        z = None
        a, r = acc_ref[b], acc_rec[b]
        if a is not None and r is not None and n_ref[b] >= min_items and n_rec[b] >= min_items:
            pooled = (a * n_ref[b] + r * n_rec[b]) / (n_ref[b] + n_rec[b])
            se = math.sqrt(pooled * (1 - pooled) * (1 / n_ref[b] + 1 / n_rec[b]))
            z = (a - r) / se if se > 0 else (math.inf if a > r else 0.0)
        out.append(
            BinMove(b, b / k, (b + 1) / k, n_ref[b], n_rec[b], a, r, sh_ref[b], sh_rec[b], z)
        )
    return out


def moved_bins(moves: Sequence[BinMove]) -> tuple[list[BinMove], bool]:
    """The bins to take exemplars from, in order, and whether they are ordered by a fall of
    accuracy (True) or by a grown share (False): the bins whose accuracy fell (``z > 0``),
    largest ``z`` first; when none fell, the bins whose share of the traffic grew, most first."""
    fell = sorted((m for m in moves if m.z is not None and m.z > 0), key=lambda m: -(m.z or 0.0))
    if fell:
        return fell, True
    grew = sorted(
        (m for m in moves if m.share_recent > m.share_reference and m.n_recent > 0),
        key=lambda m: m.share_reference - m.share_recent,
    )
    return grew, False


# --- reasons ----------------------------------------------------------------------------------


def _num(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def failed_confident_reason(
    confidence: float, label_source: str | None, content: str | None
) -> str:
    """Why a failed, confident reply shows a calibration alert."""
    source = f" ({label_source})" if label_source else ""
    return f"failed{source} at stated confidence {confidence:.2f}{quoted(content)}"


def drift_reason(
    move: BinMove, by_accuracy: bool, confidence: float, failed: bool, content: str | None
) -> str:
    """Why a reply of a moved confidence bin shows a drift alert."""
    if by_accuracy:
        head = (
            f"bin {move.label()}: accuracy {_num(move.accuracy_recent)} now vs "
            f"{_num(move.accuracy_reference)} in the reference"
        )
    else:
        head = (
            f"bin {move.label()}: {move.share_recent:.0%} of the traffic now vs "
            f"{move.share_reference:.0%} in the reference"
        )
    outcome = "failed" if failed else "answered"
    return f"{head}; {outcome} at confidence {confidence:.2f}{quoted(content)}"


def inversion_reason(
    min_confidence: float, escalated: bool, success: bool | None, trigger: str | None
) -> str:
    """Why a conversation shows an escalation inversion."""
    if escalated:
        by = f" (trigger {trigger})" if trigger else ""
        outcome = {True: ", succeeded", False: ", failed", None: ""}[success]
        return f"escalated{by} although its minimum confidence was {min_confidence:.2f}{outcome}"
    return f"not escalated at minimum confidence {min_confidence:.2f}, and failed"


def slow_reason(seconds: float, turns: int | None, trigger: str | None, why: str | None) -> str:
    """Why an escalation shows a slow-escalation alert."""
    parts = [f"escalated {seconds:.0f} s after its first event"]
    if turns is not None:
        parts.append(f"{turns} turns")
    if trigger:
        parts.append(f"trigger {trigger}")
    return ", ".join(parts) + quoted(why)


_QUOTE_KEYS = ("sentence", "excerpt", "quote", "error", "phrase", "content")


def evidence_quote(evidence: object) -> str | None:
    """The first text a verdict's evidence quotes (depth first, keys :data:`_QUOTE_KEYS`)."""
    if isinstance(evidence, Mapping):
        for key in _QUOTE_KEYS:
            value = evidence.get(key)
            if isinstance(value, str) and value.strip():
                return value
        children: Iterable[object] = evidence.values()
    elif isinstance(evidence, list | tuple):
        children = evidence
    else:
        return None
    for child in children:
        found = evidence_quote(child)
        if found is not None:
            return found
    return None


def judge_reason(judge: str, rationale: str | None, evidence: object) -> str:
    """Why a flagged conversation shows a judge alert: the judge, its rationale, its quote."""
    said = f": {rationale}" if rationale else ""
    return f"{judge}{said}{quoted(evidence_quote(evidence))}"


def bounded_evidence(evidence: object) -> object:
    """``evidence`` when its JSON fits :data:`DETAIL_CHARS`, else its quote only."""
    text = json.dumps(evidence, default=str)
    if len(text) <= DETAIL_CHARS:
        return evidence
    return {"truncated": True, "quote": evidence_quote(evidence)}


def gate_reason(gate: Mapping[str, Any], success: bool | None = None) -> str:
    """Why a gate decision shows a gate alert: the decision, its confidences and threshold,
    why it was degraded, what the inline checks found, the conversation's outcome."""
    parts = [
        f"{gate.get('decision', '?')} at confidence {_num(_float(gate.get('confidence')))} "
        f"(calibrated {_num(_float(gate.get('calibrated')))}, threshold "
        f"{_num(_float(gate.get('threshold')))})"
    ]
    if gate.get("enforced") is False:
        parts.append("shadow")
    if gate.get("degraded"):
        parts.append(f"degraded: {gate['degraded']}")
    findings = [f for f in gate.get("findings") or [] if isinstance(f, Mapping)]
    if findings:
        parts.append(
            "found " + "; ".join(f"{f.get('judge')}: {f.get('critique')}" for f in findings)
        )
    if success is not None:
        parts.append("succeeded" if success else "failed")
    return ", ".join(parts)


def _float(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def dead_letter_reason(letter_id: int, reason: str, where: str | None, detail: str) -> str:
    """Why a dead letter shows a dead-letter alert."""
    at = f" at {where}" if where else ""
    return f"dead letter {letter_id}: {reason}{at}: {detail}"


# --- links and payloads -----------------------------------------------------------------------


def conversation_link(dashboard_url: str, conversation_id: str) -> str:
    """The Conversation dashboard with ``conversation_id`` selected."""
    query = urlencode([("var-conversation", conversation_id)])
    return f"{dashboard_url.rstrip('/')}{CONVERSATION_DASHBOARD}?{query}"


def conversation_command(conversation_id: str) -> str:
    """The command that prints the conversation (the id quoted for a POSIX shell)."""
    return f"monitor conversation {shlex.quote(conversation_id)}"


def episode_key(fingerprint: str, fired_at: datetime) -> str:
    """``<fingerprint>:<fired_at ISO>``: the key of an episode's exemplars in a payload (equal
    to ``Notification.episode`` and ``AlertState.episode``)."""
    return f"{fingerprint}:{fired_at.isoformat()}"


def payload_exemplars(payload: Mapping[str, Any], episode: str) -> list[dict[str, Any]]:
    """The exemplars an outbox payload carries for ``episode`` (none: ``[]``), by rank."""
    found = payload.get("exemplars")
    if not isinstance(found, Mapping):
        return []
    items = found.get(episode)
    if not isinstance(items, list):
        return []
    kept = [dict(x) for x in items if isinstance(x, Mapping) and isinstance(x.get("reason"), str)]
    return sorted(kept, key=lambda x: x.get("rank") or 0)


def presented(exemplar: Mapping[str, Any], dashboard_url: str | None) -> dict[str, Any]:
    """An exemplar of a payload as a receiver gets it: with ``link`` (when a dashboard URL is
    configured) and ``command`` for a conversation."""
    out = dict(exemplar)
    cid = exemplar.get("conversation_id")
    if isinstance(cid, str) and cid:
        if dashboard_url:
            out["link"] = conversation_link(dashboard_url, cid)
        out["command"] = conversation_command(cid)
    return out


def with_links(payload: Mapping[str, Any], dashboard_url: str | None) -> dict[str, Any]:
    """A copy of an outbox payload whose exemplars are :func:`presented` (a receiver's view),
    by rank."""
    out = dict(payload)
    found = payload.get("exemplars")
    if isinstance(found, Mapping):
        out["exemplars"] = {
            str(episode): [presented(x, dashboard_url) for x in payload_exemplars(payload, episode)]
            for episode in found
        }
    return out
