"""Real answers for the exemplar tests: agents resampled from real model answers
(tests/data/answers) and real tau2-bench runs (tests/data/tau2-results), each built so that
one or more default alert rules fire on it.

- ``over-t3``, ``over-t2``, ``over-t1``: a real mixture overconfident by 0.3 (the calibration,
  Brier and overconfidence rules of each tier); ``over-t3`` is sampled at 20 % (the others at
  100 %), so most of its conversations are outside the sample and its exemplars are promoted;
  each of its wrong answers says :data:`LEAKY` (an email address, a token and an API key), so
  its exemplars quote a secret that every output must redact;
- ``changed`` (tier 3): calibrated real answers that turn into lsat_gpt-3.5-turbo's at
  :data:`CHANGE` (drift, accuracy drop);
- ``inverted`` (tier 2): calibrated real answers; it escalates every answer it states with
  confidence at least :data:`INVERTED_AT` (an inverted threshold: escalation inversion);
- ``gate-cautious``, ``gate-over``, ``gate-slow`` (tier 1): real answers that ask the shipped gate
  (``monitor.gate.decide``, built-in policy) before they are sent: a pool unsure half the time
  (gate escalation rate), lsat_gpt-3.5-turbo's (failures among proceeded), and calibrated
  answers one in ten of whose decisions ran past the deadline under load (degraded, fail open);
- the grok-4-fast-reasoning airline run (55 escalations; tier 3): tau2 simulations run at
  machine speed (the simulated customer answers within a second), so each conversation is
  replayed at a human customer's pace, its clock stretched :data:`HUMAN_PACE` times (its turns,
  order and relative timing kept): slow escalation;
- the grok-3 airline run of 2025-10-05 (8 of 20 conversations claim an action no tool call
  backs): the deterministic judges' verdicts, stored two minutes after each conversation's
  last event, as the judge worker would: authorization fabrication.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from monitor.contract.events import (
    Agent,
    AgentEvent,
    Context,
    EscalationPayload,
    MessagePayload,
    OutcomePayload,
)
from monitor.gate.checks import CheckSet
from monitor.gate.decide import decide, decision_event
from monitor.gate.policy import DEFAULT_POLICY
from monitor.gate.request import GateRequest
from monitor.judges.base import Conversation, Verdict
from monitor.judges.deterministic import run_all
from monitor.replay.tau2 import tau2_events
from monitor.sampling.policy import SamplingPolicy
from monitor.sampling.rules import StratumRule
from monitor.sim.answers import (
    AnswerAgent,
    Mixture,
    Pool,
    answer_events,
    answer_items,
    parse_pools,
    tune,
)

DATA = Path(__file__).resolve().parents[1] / "data"
ANSWERS = DATA / "answers" / "stated_confidence_answers.csv"
SLOW_RUN = (
    DATA
    / "tau2-results"
    / (
        "blakeelias_2025-10-06T06-45-09.212115_airline_llm_agent_grok-4-fast-reasoning"
        "_user_simulator_grok-4-fast-reasoning.json.gz"
    )
)
JUDGED_RUN = (
    DATA
    / "tau2-results"
    / (
        "blakeelias_2025-10-05T22-50-14.083933_airline_llm_agent_grok-3_user_simulator_grok-3.json.gz"
    )
)

T0 = (datetime.now(UTC) - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
HOURS = 4
CHANGE = T0 + timedelta(hours=3)
SLOW_AT = T0 + timedelta(hours=3)  # the slow agent's first conversation starts here
JUDGED_AT = T0 + timedelta(hours=3, minutes=30)
HUMAN_PACE = 5.0
INVERTED_AT = 0.8
SLOW_EVERY = 10  # one gate decision in ten runs past the deadline
CALIBRATED = Mixture(
    (("lsat_gemini-1.5-flash", 0.4), ("sciq_claude-3-haiku", 0.2), ("sciq_gemini-1.5-flash", 0.4))
)
LEAKY = (
    "The answer is (C); I mailed it to jane.doe@example.com with token=tok_4f9a8b7c6d5e "
    "and key sk-live-0123456789abcdefghijk"
)
LEAKED = ("jane.doe@example.com", "tok_4f9a8b7c6d5e", "sk-live-0123456789abcdefghijk")
POLICY = SamplingPolicy(strata=(StratumRule(agent="over-t3", rate=0.2),))


class Clock:
    """A timer advancing ``step`` seconds per reading (the gate's deadline clock)."""

    def __init__(self, step: float) -> None:
        self.step, self.readings = step, 0

    def __call__(self) -> float:
        self.readings += 1
        return self.readings * self.step


@dataclass
class Truth:
    """What the tests compare exemplars with, by conversation id."""

    answers: dict[str, tuple[str, datetime, float, int]] = field(default_factory=dict)
    escalated: set[str] = field(default_factory=set)
    gate: dict[str, tuple[str, datetime, str, float, str | None]] = field(default_factory=dict)
    escalation_seconds: dict[str, float] = field(default_factory=dict)
    judged: dict[str, list[AgentEvent]] = field(default_factory=dict)
    agent_of: dict[str, str] = field(default_factory=dict)


def _answers(
    agent: AnswerAgent, pools: dict[str, Pool], per_hour: float, seed: int
) -> list[tuple[datetime, float, int]]:
    return answer_items(agent, pools, T0, T0 + timedelta(hours=HOURS), per_hour, seed)


def message(cid: str, n: int, at: datetime, who: Agent, ctx: Context, conf: float) -> AgentEvent:
    payload = MessagePayload(
        role="assistant", content="answer", confidence=conf, confidence_source="verbalized"
    )
    return AgentEvent.of(
        payload, event_id=f"{cid}:{n}", ts=at, conversation_id=cid, agent=who, context=ctx, turn=0
    )


def outcome(cid: str, n: int, at: datetime, who: Agent, ctx: Context, ok: bool) -> AgentEvent:
    payload = OutcomePayload(success=ok, source="ground_truth")
    return AgentEvent.of(
        payload, event_id=f"{cid}:{n}", ts=at, conversation_id=cid, agent=who, context=ctx
    )


def _escalation(
    cid: str, n: int, at: datetime, who: Agent, ctx: Context, trigger: str
) -> AgentEvent:
    payload = EscalationPayload(trigger=trigger, reason="handed to a person")  # type: ignore[arg-type]
    return AgentEvent.of(
        payload, event_id=f"{cid}:{n}", ts=at, conversation_id=cid, agent=who, context=ctx, turn=0
    )


def _inverted(
    agent: AnswerAgent, items: list[tuple[datetime, float, int]], truth: Truth
) -> list[AgentEvent]:
    who, ctx = Agent(id=agent.id), Context(domain=agent.domain, tier=agent.tier)
    out = []
    for i, (at, conf, y) in enumerate(items):
        cid = f"ex-{agent.id}-{i:06d}"
        out.append(message(cid, 0, at, who, ctx, conf))
        if conf >= INVERTED_AT:
            out.append(_escalation(cid, 1, at + timedelta(seconds=1), who, ctx, "threshold"))
            truth.escalated.add(cid)
        out.append(outcome(cid, 2, at + timedelta(seconds=2), who, ctx, bool(y)))
        truth.answers[cid] = (agent.id, at, conf, y)
    return out


def _gated(
    agent: AnswerAgent, items: list[tuple[datetime, float, int]], truth: Truth, slow_every: int
) -> list[AgentEvent]:
    who, ctx = Agent(id=agent.id), Context(domain=agent.domain, tier=agent.tier)
    checks = CheckSet()
    out = []
    for i, (at, conf, y) in enumerate(items):
        cid = f"ex-{agent.id}-{i:06d}"
        req = GateRequest(
            conversation_id=cid,
            agent=who,
            content="answer",
            confidence=conf,
            domain=agent.domain,
            tier=agent.tier,
            request_id=cid,
        )
        slow = bool(slow_every) and i % slow_every == slow_every - 1
        d = decide(
            req,
            DEFAULT_POLICY,
            {},
            checks,
            event_id=f"gate:{cid}",
            now=at,
            timer=Clock(0.06 if slow else 0.0005),
        )
        out.append(decision_event(req, d, at))
        g = d.payload
        truth.gate[cid] = (agent.id, at, g.decision, g.calibrated, g.degraded)
        truth.answers[cid] = (agent.id, at, conf, y)
        if g.decision == "escalate":
            out.append(_escalation(cid, 1, at + timedelta(seconds=1), who, ctx, "policy"))
        else:
            out.append(message(cid, 1, at + timedelta(seconds=1), who, ctx, conf))
            out.append(outcome(cid, 2, at + timedelta(seconds=2), who, ctx, bool(y)))
    return out


def _run(path: Path) -> dict[str, list[AgentEvent]]:
    by: dict[str, list[AgentEvent]] = defaultdict(list)
    for e in tau2_events(json.loads(gzip.decompress(path.read_bytes()))):
        by[e.conversation_id].append(e)
    return dict(by)


def _slow(truth: Truth) -> list[AgentEvent]:
    """The slow agent's run: each conversation moved to start at ``SLOW_AT`` plus its recorded
    start offset, its clock stretched ``HUMAN_PACE`` times, tier 3."""
    run = _run(SLOW_RUN)
    first = min(min(e.ts for e in evs) for evs in run.values())
    out = []
    for cid, evs in run.items():
        start = min(e.ts for e in evs)
        moved = SLOW_AT + (start - first)
        shifted = [
            e.model_copy(
                update={
                    "ts": moved + (e.ts - start) * HUMAN_PACE,
                    "context": (e.context or Context()).model_copy(update={"tier": 3}),
                }
            )
            for e in evs
        ]
        esc = [e.ts for e in shifted if e.type == "escalation"]
        if esc:
            truth.escalation_seconds[cid] = (min(esc) - moved).total_seconds()
        truth.agent_of[cid] = evs[0].agent.id
        out += shifted
    return out


def _judged(truth: Truth) -> list[AgentEvent]:
    """The judged run, moved to start at ``JUDGED_AT`` (its own pace)."""
    run = _run(JUDGED_RUN)
    first = min(min(e.ts for e in evs) for evs in run.values())
    out = []
    for cid, evs in run.items():
        shifted = [e.model_copy(update={"ts": JUDGED_AT + (e.ts - first)}) for e in evs]
        truth.judged[cid] = shifted
        truth.agent_of[cid] = evs[0].agent.id
        out += shifted
    return out


def _leaky(e: AgentEvent, items: list[tuple[datetime, float, int]]) -> AgentEvent:
    """``e`` saying :data:`LEAKY` when it is the message of a wrong answer."""
    i = int(e.conversation_id.rsplit("-", 1)[1])
    if e.message is None or items[i][2]:
        return e
    return e.model_copy(update={"message": e.message.model_copy(update={"content": LEAKY})})


def verdicts(truth: Truth) -> list[Verdict]:
    """The deterministic judges' verdicts on the judged run."""
    return [v for evs in truth.judged.values() for v in run_all(Conversation.of(evs))]


def build() -> tuple[list[AgentEvent], Truth]:
    """Every event of the exemplar tests (module docstring) and the truth behind them."""
    pools = parse_pools(ANSWERS.read_text())
    over = tune(
        pools, CALIBRATED, Mixture((("lsat_gpt-3.5-turbo", 1.0),)), "overconfidence_gap", 0.3
    )
    worse = Mixture((("lsat_gpt-3.5-turbo", 1.0),))
    truth = Truth()
    events: list[AgentEvent] = []
    plain = [
        (AnswerAgent("over-t3", 3, "qa", ((None, over),)), 1200),
        (AnswerAgent("over-t2", 2, "qa", ((None, over),)), 600),
        (AnswerAgent("over-t1", 1, "qa", ((None, over),)), 300),
        (AnswerAgent("changed", 3, "qa", ((None, CALIBRATED), (CHANGE, worse))), 600),
    ]
    for seed, (agent, per_hour) in enumerate(plain):
        items = _answers(agent, pools, per_hour, seed)
        mine = answer_events(agent, items, "ex")
        if agent.id == "over-t3":
            mine = [_leaky(e, items) for e in mine]
        events += mine
        for i, (at, conf, y) in enumerate(items):
            truth.answers[f"ex-{agent.id}-{i:06d}"] = (agent.id, at, conf, y)
    inverted = AnswerAgent("inverted", 2, "qa", ((None, CALIBRATED),))
    events += _inverted(inverted, _answers(inverted, pools, 300, 11), truth)
    gated = [
        (
            AnswerAgent(
                "gate-cautious", 1, "qa", ((None, Mixture((("lsat_claude-3-haiku", 1.0),))),)
            ),
            0,
        ),
        (AnswerAgent("gate-over", 1, "qa", ((None, worse),)), 0),
        (AnswerAgent("gate-slow", 1, "qa", ((None, CALIBRATED),)), SLOW_EVERY),
    ]
    for seed, (agent, slow_every) in enumerate(gated, start=20):
        events += _gated(agent, _answers(agent, pools, 600, seed), truth, slow_every)
    events += _slow(truth)
    events += _judged(truth)
    return events, truth
