"""Stratified, deterministic conversation sampling and the estimators that undo it.

Pure: imports no I/O library. Configuration, the hash and stratum matching live in
:mod:`monitor.sampling.rules`, the estimators (``weighted_mean``, ``Estimate``) in
:mod:`monitor.sampling.estimates`; both are re-exported here.

How a conversation is decided
    A conversation falls in one stratum, chosen by (agent id, domain, tier) with the most
    specific matching rule of the ``SamplingPolicy``. It is in the *probability sample* when
    ``hash_unit(conversation_id, policy.salt) < rate``: a stable hash, so every worker, every
    replay and every process agrees, and the whole conversation is in or out. Independently, the
    always-sample rules (escalation, an assistant message below the confidence floor, a failed
    tool call, negative feedback) pull a conversation in. ``SamplingDecision.reasons`` records
    every reason that holds (``"rate"`` first, then the rules).

    The decision is a pure function of ``ConversationFacts``, which fold the conversation's
    events. The fold is order-independent and idempotent (stratum attributes come from the
    earliest event by ``(ts, event_id)`` that carries them; the rule facts are ``any``/``min``),
    so a replay in any order, or with duplicates, reaches the same decision. A decision can
    change as events arrive: a later escalation turns it on (``by_rate`` never changes unless
    the stratum attributes do).

Why always-sampled conversations do not bias the estimates (the choice made here)
    Weighted estimates use the probability sample only. A conversation's inclusion probability
    in it is its stratum ``rate``, whatever the rules say, so ``weight = 1 / rate`` when
    ``by_rate`` and ``None`` otherwise; ``inclusion_probability`` is always ``rate`` and
    ``weight`` is always ``None`` or ``1 / inclusion_probability``. A conversation pulled in
    only by a rule is judged (for alerts and debugging) but carries ``by_rate=False`` and
    ``weight=None`` and contributes zero weight (``estimation_weight()``) to calibration sums.
    A conversation that satisfies both is in the probability sample with weight ``1 / rate``.
    This Horvitz-Thompson design is unbiased whatever the rules are and however late they fire,
    and a conversation's weight never changes once decided, so additive metric sums stay valid.
    The cost is variance: the rule-pulled labels do not sharpen the population estimates.

    Alternative, ``mode="rule_stratum"``: treat "a rule fired" as its own stratum sampled with
    probability 1, i.e. weight ``1`` for rule-pulled conversations and ``1 / rate`` for the
    others. It uses every label, and is unbiased only when (a) the rule is decided for every
    conversation, sampled or not, from data the sampler sees for all of them (true of the four
    rules above, which read the conversation's own events, and false of anything computed from
    judge verdicts); (b) the rule is evaluated on the final facts: a rule that fires late
    changes that conversation's weight from ``1 / rate`` to ``1``, so sums already written must
    be corrected (subtract the old contribution, add the new); and (c) the stratum rate the
    conversation would have had is the one recorded. ``weighted_mean`` implements both modes.

    Strata with rate 0 have no probability sample: estimates cover the other strata only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from monitor.contract.events import AgentEvent
from monitor.sampling.estimates import Estimate, WeightMode, weighted_mean
from monitor.sampling.rules import (
    DEFAULT_STRATUM,
    AlwaysSampleRules,
    Reason,
    SamplingPolicy,
    Stratum,
    StratumRule,
    hash_unit,
)

__all__ = [
    "DEFAULT_STRATUM",
    "AlwaysSampleRules",
    "ConversationFacts",
    "ConversationSampler",
    "Estimate",
    "Reason",
    "SamplingDecision",
    "SamplingPolicy",
    "Stratum",
    "StratumRule",
    "WeightMode",
    "decide",
    "decide_events",
    "hash_unit",
    "weighted_mean",
]

_Order = tuple[datetime, str]


def _earlier(key: _Order, current: _Order | None) -> bool:
    return current is None or key < current


@dataclass(frozen=True, slots=True)
class ConversationFacts:
    """What sampling needs to know about one conversation, folded from its events.

    Build with ``ConversationFacts(conversation_id)`` and fold events with ``observe``, or set
    the fields directly (as a store or a simulation would). ``agent_id``/``domain``/``tier``
    come from the earliest event (by ``(ts, event_id)``) carrying each; ``min_confidence`` is
    the lowest assistant-message confidence; ``min_feedback`` the lowest feedback score.
    """

    conversation_id: str
    agent_id: str | None = None
    domain: str | None = None
    tier: int | None = None
    escalated: bool = False
    min_confidence: float | None = None
    failed_tool_call: bool = False
    min_feedback: float | None = None
    _agent_at: _Order | None = field(default=None, repr=False, compare=False)
    _domain_at: _Order | None = field(default=None, repr=False, compare=False)
    _tier_at: _Order | None = field(default=None, repr=False, compare=False)

    def observe(self, event: AgentEvent) -> ConversationFacts:
        """Return the facts with ``event`` folded in (``self`` when nothing changes).

        Commutative and idempotent over events. Raises ValueError when the event belongs to
        another conversation.
        """
        if event.conversation_id != self.conversation_id:
            raise ValueError(
                f"event {event.event_id!r} is for conversation {event.conversation_id!r}, "
                f"not {self.conversation_id!r}"
            )
        at: _Order = (event.ts, event.event_id)
        changes: dict[str, Any] = {}
        if _earlier(at, self._agent_at):
            changes.update(agent_id=event.agent.id, _agent_at=at)
        ctx = event.context
        if ctx is not None and ctx.domain is not None and _earlier(at, self._domain_at):
            changes.update(domain=ctx.domain, _domain_at=at)
        if ctx is not None and ctx.tier is not None and _earlier(at, self._tier_at):
            changes.update(tier=ctx.tier, _tier_at=at)
        if event.escalation is not None and not self.escalated:
            changes["escalated"] = True
        msg = event.message
        conf = msg.confidence if msg is not None and msg.role == "assistant" else None
        if conf is not None and (self.min_confidence is None or conf < self.min_confidence):
            changes["min_confidence"] = conf
        if event.tool_result is not None and not event.tool_result.ok:
            changes["failed_tool_call"] = True
        fb = event.feedback
        if fb is not None and (self.min_feedback is None or fb.score < self.min_feedback):
            changes["min_feedback"] = fb.score
        return replace(self, **changes) if changes else self


@dataclass(frozen=True, slots=True)
class SamplingDecision:
    """Whether a conversation is sampled, why, and its weight in the population estimates.

    Invariants: ``sampled == bool(reasons)``; ``by_rate == ("rate" in reasons)``;
    ``inclusion_probability == rate`` (the probability of being in the probability sample);
    ``weight == 1 / rate`` when ``by_rate`` else ``None``. See the module docstring.
    """

    sampled: bool
    by_rate: bool
    reasons: tuple[str, ...]
    stratum: str
    rate: float
    inclusion_probability: float
    weight: float | None

    @property
    def by_rule(self) -> bool:
        """True when at least one always-sample rule fired (whatever the rate decided)."""
        return any(r != Reason.RATE for r in self.reasons)

    @property
    def rule_stratum_probability(self) -> float:
        """Inclusion probability under the ``rule_stratum`` design: 1 if a rule fired, else rate."""
        return 1.0 if self.by_rule else self.inclusion_probability

    def estimation_weight(self, mode: WeightMode = "probability_sample") -> float:
        """The weight of this conversation's items in additive metric sums (0.0 = excluded).

        ``probability_sample`` (default): ``1 / rate`` if ``by_rate`` else 0. ``rule_stratum``:
        ``1 / rule_stratum_probability`` if sampled else 0 (conditions in the module docstring).
        """
        if mode == "probability_sample":
            return self.weight if self.weight is not None else 0.0
        if mode == "rule_stratum":
            return 1.0 / self.rule_stratum_probability if self.sampled else 0.0
        raise ValueError(f"unknown weight mode {mode!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (what a judge request or a conversation row stores)."""
        return {**asdict(self), "reasons": list(self.reasons)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SamplingDecision:
        """Inverse of ``to_dict``. Raises KeyError/TypeError on a malformed mapping."""
        return cls(
            sampled=bool(data["sampled"]),
            by_rate=bool(data["by_rate"]),
            reasons=tuple(str(r) for r in data["reasons"]),
            stratum=str(data["stratum"]),
            rate=float(data["rate"]),
            inclusion_probability=float(data["inclusion_probability"]),
            weight=None if data["weight"] is None else float(data["weight"]),
        )


def decide(policy: SamplingPolicy, facts: ConversationFacts) -> SamplingDecision:
    """The sampling decision for a conversation with these facts under ``policy``.

    Pure and deterministic: the same (policy, facts) give the same decision in every process.
    """
    stratum = policy.stratum_for(facts.agent_id, facts.domain, facts.tier)
    by_rate = hash_unit(facts.conversation_id, policy.salt) < stratum.rate
    fired = policy.always_sample.reasons(
        escalated=facts.escalated,
        min_confidence=facts.min_confidence,
        failed_tool_call=facts.failed_tool_call,
        min_feedback=facts.min_feedback,
    )
    reasons = ((Reason.RATE.value,) if by_rate else ()) + tuple(r.value for r in fired)
    return SamplingDecision(
        sampled=bool(reasons),
        by_rate=by_rate,
        reasons=reasons,
        stratum=stratum.name,
        rate=stratum.rate,
        inclusion_probability=stratum.rate,
        weight=1.0 / stratum.rate if by_rate else None,
    )


class ConversationSampler:
    """Incremental sampling state of one conversation: feed its events, read the decision.

    ``observe`` returns the decision after the event; callers compare it with the previous one
    to act on a change (for example, emit a judge request when ``sampled`` turns true).
    """

    def __init__(self, policy: SamplingPolicy, conversation_id: str) -> None:
        self._policy = policy
        self._facts = ConversationFacts(conversation_id)
        self._decision = decide(policy, self._facts)

    @property
    def facts(self) -> ConversationFacts:
        """The facts folded so far."""
        return self._facts

    @property
    def decision(self) -> SamplingDecision:
        """The decision given the events seen so far."""
        return self._decision

    def observe(self, event: AgentEvent) -> SamplingDecision:
        """Fold one event in and return the (possibly changed) decision.

        Raises ValueError when the event belongs to another conversation.
        """
        facts = self._facts.observe(event)
        if facts is not self._facts:
            self._facts = facts
            self._decision = decide(self._policy, facts)
        return self._decision


def decide_events(
    policy: SamplingPolicy, events: Iterable[AgentEvent]
) -> dict[str, SamplingDecision]:
    """Decide every conversation in ``events`` (any order, any interleaving), keyed by id."""
    facts: dict[str, ConversationFacts] = {}
    for ev in events:
        cid = ev.conversation_id
        facts[cid] = facts.get(cid, ConversationFacts(cid)).observe(ev)
    return {cid: decide(policy, f) for cid, f in facts.items()}
