"""Gate effectiveness: what the gate's decisions prevent and what they cost (pure).

Input: one :class:`GatedConversation` per conversation (its agent, domain, the gate's decision
for it, and its outcome ``success`` or None when none arrived yet), from one of two sources:

- ``recorded``: the conversation's latest ``gate`` decision event (``POST /v1/gate``);
- ``shadow``: the same, for a decision of a rule in shadow mode (not enforced: the agent was
  told to proceed, so the outcome is that of the agent's own answer whatever the decision).
  ``failures_prevented`` and ``escalation_rate`` are then what enforcing would prevent and
  cost, without the bias of enforced traffic (whose escalated outcomes are the human's);
- ``replayed``: conversations without a decision event, their recorded minimum assistant
  confidence replayed against the policy's threshold (through the stored map when there is
  one): ``escalate`` below it, else ``proceed``. Only the threshold is replayed, not the checks.

Per agent x domain and source (:func:`effectiveness`), over conversations with an outcome:

- ``failure_rate_all``: failures among all gated conversations, i.e. the agent's failure rate
  without the gate (outcomes are those of the agent's own answers; for agents that obey the
  gate, escalated conversations' outcomes are the human's and this is not the ungated rate);
- ``failure_rate_proceeded``: failures among those the gate let through;
- ``failures_prevented``: failures among the conversations the gate stopped (revise or
  escalate) / all failures: the share Cleanlab reports ("up to 57 %");
- ``relative_reduction``: ``1 - failure_rate_proceeded / failure_rate_all``;
- ``escalation_rate`` (the human cost) and ``revise_rate`` over all gated conversations, and
  ``revise_failure_rate``: failures among the revised;
- for ``recorded`` rows, the **ungated baseline** (:class:`UngatedCounts`): the failure rate of
  the same agent's conversations in the same domain that started in the range with *no* gate
  decision (``failure_rate_ungated``, over those with an outcome; ``ungated_conversations``
  all of them), measured rather than replayed, and ``reduction_vs_ungated``
  (``1 - failure_rate_proceeded / failure_rate_ungated``). It is a fair baseline when the
  ungated conversations are like the gated ones (e.g. the agent calls the gate on a random
  share of its traffic); when it calls the gate only on some kinds of conversation, the two
  populations differ and the comparison says so only through the numbers.

Rates are :class:`~monitor.analytics.calibration.Proportion`: ``k`` of ``n`` with a 95 % Wilson
interval (``[low, high]``); counts are plain (unweighted).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from monitor.analytics.calibration import Proportion

DECISIONS = ("proceed", "revise", "escalate")


@dataclass(frozen=True)
class GatedConversation:
    agent_id: str
    domain: str
    decision: str
    success: bool | None
    source: str = "recorded"


@dataclass(frozen=True)
class Effect:
    """One agent x domain x source (see the module docstring)."""

    agent_id: str
    domain: str
    source: str
    conversations: int
    decisions: dict[str, int]
    with_outcome: int
    failure_rate_all: Proportion
    failure_rate_proceeded: Proportion
    failures_prevented: Proportion
    relative_reduction: float | None
    escalation_rate: Proportion
    revise_rate: Proportion
    revise_failure_rate: Proportion
    notes: list[str] = field(default_factory=list)
    ungated_conversations: int = 0
    failure_rate_ungated: Proportion | None = None
    reduction_vs_ungated: float | None = None


@dataclass(frozen=True)
class UngatedCounts:
    """A gated agent's conversations in one domain without any gate decision: how many,
    how many with an outcome, and the failures among those."""

    agent_id: str
    domain: str
    conversations: int
    with_outcome: int
    failures: int


def _effect(key: tuple[str, str, str], rows: list[GatedConversation]) -> Effect:
    agent, domain, source = key
    decisions = {d: sum(r.decision == d for r in rows) for d in DECISIONS}
    known = [r for r in rows if r.success is not None]
    failed = [r for r in known if r.success is False]
    proceeded = [r for r in known if r.decision == "proceed"]
    revised = [r for r in known if r.decision == "revise"]
    all_rate = Proportion.of(len(failed), len(known))
    proceeded_rate = Proportion.of(sum(r.success is False for r in proceeded), len(proceeded))
    stopped = sum(r.decision != "proceed" for r in failed)
    reduction = None
    if all_rate.value and proceeded_rate.value is not None:
        reduction = 1.0 - proceeded_rate.value / all_rate.value
    notes = []
    if source == "shadow":
        notes.append("shadow: not enforced; the figures are what enforcing would prevent and cost")
    if len(known) < len(rows):
        notes.append(f"{len(rows) - len(known)} conversations have no outcome yet")
    return Effect(
        agent_id=agent,
        domain=domain,
        source=source,
        conversations=len(rows),
        decisions=decisions,
        with_outcome=len(known),
        failure_rate_all=all_rate,
        failure_rate_proceeded=proceeded_rate,
        failures_prevented=Proportion.of(stopped, len(failed)),
        relative_reduction=reduction,
        escalation_rate=Proportion.of(decisions["escalate"], len(rows)),
        revise_rate=Proportion.of(decisions["revise"], len(rows)),
        revise_failure_rate=Proportion.of(sum(r.success is False for r in revised), len(revised)),
        notes=notes,
    )


def _with_ungated(e: Effect, u: UngatedCounts | None) -> Effect:
    if e.source != "recorded" or u is None:
        return e
    rate = Proportion.of(u.failures, u.with_outcome)
    reduction = None
    if rate.value and e.failure_rate_proceeded.value is not None:
        reduction = 1.0 - e.failure_rate_proceeded.value / rate.value
    return replace(
        e,
        ungated_conversations=u.conversations,
        failure_rate_ungated=rate,
        reduction_vs_ungated=reduction,
    )


def effectiveness(
    conversations: Iterable[GatedConversation], ungated: Iterable[UngatedCounts] = ()
) -> list[Effect]:
    """One :class:`Effect` per (agent, domain, source), sorted by those keys; ``recorded``
    rows carry the ungated baseline of their agent x domain from ``ungated`` when given."""
    groups: dict[tuple[str, str, str], list[GatedConversation]] = {}
    for c in conversations:
        if c.decision not in DECISIONS:
            raise ValueError(f"unknown decision {c.decision!r}")
        groups.setdefault((c.agent_id, c.domain, c.source), []).append(c)
    base = {(u.agent_id, u.domain): u for u in ungated}
    return [_with_ungated(_effect(k, groups[k]), base.get(k[:2])) for k in sorted(groups)]


def replayed_decision(calibrated_min_confidence: float, threshold: float) -> str:
    """The decision the threshold alone gives a recorded confidence (``escalate`` below)."""
    return "escalate" if calibrated_min_confidence < threshold else "proceed"
