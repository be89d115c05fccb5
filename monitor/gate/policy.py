"""The gate policy: thresholds, inline checks and what they do, per agent/domain/tier (pure).

A policy is YAML (docs/gate.md), validated with :func:`monitor.core.yaml_config.load_yaml_model`
so every error names ``file:line: field``::

    version: "2026-11-23"        # policy_version in every answer and decision event
    rules:                       # the first rule matching (agent, domain, tier) applies
      - agent: support-bot       # "*" (default) = any agent
        domain: airline          # "*" (default) = any domain (also none)
        tier: 3                  # omitted = any tier
        threshold: 0.8           # calibrated confidence below it -> below_threshold, or
                                 # {advisor: {keep: 0.8}, fallback: 0.6} (docs/gate.md)
        below_threshold: escalate  # or revise
        checks: [det.authorization, det.ignored_error, domain]  # "domain" = domain plugins
        on_check_failure: revise # or escalate
        fail: open               # open: proceed / closed: escalate, when undecidable in time
        deadline_ms: 50
        llm_timeout_ms: 1500     # with "llm" in checks: the LLM judge's time budget
        on_llm_timeout: skip     # proceed | revise | escalate | skip (llm_decide.py)
        mode: enforce            # or shadow: decide and record, but answer proceed

An agent no rule matches is *unknown* to the gate (the endpoint answers 404). Without a policy
file the built-in :data:`DEFAULT_POLICY` applies: one rule for every agent, threshold 0.5,
every deterministic check inline, fail open.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from monitor.core.errors import FieldProblem
from monitor.core.yaml_config import load_yaml_model

#: The deterministic judges a rule may run inline, plus ``domain`` (the domain plugins' checks).
DETERMINISTIC_CHECKS: tuple[str, ...] = (
    "det.authorization",
    "det.repeated_call",
    "det.ignored_error",
    "det.unsupported_figure",
)
DOMAIN_CHECKS = "domain"
#: The LLM judge inline (off unless a rule lists it; never in the default checks).
LLM_CHECK = "llm"
DEFAULT_CHECKS: tuple[str, ...] = (*DETERMINISTIC_CHECKS, DOMAIN_CHECKS)
KNOWN_CHECKS: tuple[str, ...] = (*DEFAULT_CHECKS, LLM_CHECK)

Action = Literal["revise", "escalate"]
FailMode = Literal["open", "closed"]
#: ``enforce``: the answer is the decision; ``shadow``: the decision is recorded (the event's
#: ``enforced`` false) and the answer is ``proceed`` with the would-be decision beside it
Mode = Literal["shadow", "enforce"]
LlmFallback = Literal["proceed", "revise", "escalate", "skip"]
Share = Annotated[float, Field(ge=0.0, le=1.0)]
_SHARE: TypeAdapter[float] = TypeAdapter(Share)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AdvisorSpec(_Strict):
    """The threshold advisor's question (:func:`monitor.analytics.advisor.advise`): ``keep``
    or ``budget`` (exclusive) and/or ``target``, over the conversations that started in the
    last ``window_days``; fewer than ``min_conversations`` with a confidence -> the fallback."""

    keep: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    budget: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    target: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    window_days: Annotated[float, Field(gt=0.0, le=366.0)] = 7.0
    min_conversations: Annotated[int, Field(ge=1)] = 100

    @model_validator(mode="after")
    def _one_question(self) -> AdvisorSpec:
        if self.keep is None and self.budget is None and self.target is None:
            raise ValueError("give keep, budget and/or target")
        if self.keep is not None and self.budget is not None:
            raise ValueError("keep and budget are two ways to say the same thing: give one")
        return self

    def question(self) -> str:
        """E.g. ``keep=0.8 over 7d``."""
        asked = [
            f"{n}={v:g}"
            for n, v in (("keep", self.keep), ("budget", self.budget), ("target", self.target))
            if v is not None
        ]
        return f"{' '.join(asked)} over {self.window_days:g}d"


class AdvisedThreshold(_Strict):
    """``threshold: {advisor: {...}, fallback: 0.6}``: the advisor's cut per agent x domain,
    ``fallback`` until the advisor has enough data (or when it finds no cut)."""

    advisor: AdvisorSpec
    fallback: Annotated[float, Field(ge=0.0, le=1.0)]


def _threshold(value: Any) -> float | AdvisedThreshold:
    """A share in [0, 1] or an :class:`AdvisedThreshold` mapping; errors name the inner field."""
    if isinstance(value, AdvisedThreshold):
        return value
    if isinstance(value, dict):
        try:
            return AdvisedThreshold.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            msg = str(first["msg"]).removeprefix("Value error, ")
            raise FieldProblem(tuple(first["loc"]), msg) from None
    if isinstance(value, bool):
        raise ValueError("Input should be a valid number or an {advisor, fallback} mapping")
    try:
        share: float = _SHARE.validate_python(value)
        return share
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"]) from None


class GateRule(_Strict):
    """One rule: which traffic it covers and how the gate decides for it."""

    agent: str = Field(default="*", min_length=1)
    domain: str = Field(default="*", min_length=1)
    tier: Literal[1, 2, 3] | None = None
    threshold: float | AdvisedThreshold
    below_threshold: Action = "escalate"
    checks: tuple[str, ...] = DEFAULT_CHECKS
    on_check_failure: Action = "revise"
    fail: FailMode = "open"
    deadline_ms: Annotated[float, Field(gt=0.0, le=60_000.0)] = 50.0
    llm_timeout_ms: Annotated[float, Field(gt=0.0, le=60_000.0)] = 1500.0
    on_llm_timeout: LlmFallback = "skip"
    mode: Mode = "enforce"

    @field_validator("threshold", mode="plain")
    @classmethod
    def _threshold(cls, value: Any) -> float | AdvisedThreshold:
        return _threshold(value)

    @property
    def fixed_threshold(self) -> float:
        """The number in the file: the threshold, or the advisor's ``fallback``."""
        t = self.threshold
        return t.fallback if isinstance(t, AdvisedThreshold) else t

    @property
    def advisor(self) -> AdvisorSpec | None:
        """The advisor question when the threshold comes from the advisor."""
        t = self.threshold
        return t.advisor if isinstance(t, AdvisedThreshold) else None

    @property
    def uses_llm(self) -> bool:
        """True when the rule runs the LLM judge inline."""
        return LLM_CHECK in self.checks

    @field_validator("checks")
    @classmethod
    def _known_checks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [c for c in value if c not in KNOWN_CHECKS]
        if unknown:
            raise ValueError(
                f"unknown check {unknown[0]!r}: expected one of {', '.join(KNOWN_CHECKS)}"
            )
        return value

    def matches(self, agent_id: str, domain: str | None, tier: int | None) -> bool:
        """True when this rule covers the agent, domain and tier ("*"/None = any)."""
        return (
            self.agent in ("*", agent_id)
            and (self.domain == "*" or self.domain == domain)
            and (self.tier is None or self.tier == tier)
        )


class GatePolicy(_Strict):
    """The whole policy; ``source`` says where it came from (a file or "built-in")."""

    version: str = Field(min_length=1, max_length=128)
    rules: tuple[GateRule, ...] = Field(min_length=1)
    #: how often the advisor's cuts are recomputed (also whenever a new map is loaded)
    advisor_refresh_s: Annotated[float, Field(ge=1.0, le=86_400.0)] = 300.0
    source: str = "built-in"

    def rule_for(self, agent_id: str, domain: str | None, tier: int | None) -> GateRule | None:
        """The first rule matching, or None (the agent is unknown to the gate)."""
        return next((r for r in self.rules if r.matches(agent_id, domain, tier)), None)


DEFAULT_POLICY = GatePolicy(version="built-in-1", rules=(GateRule(threshold=0.5),))


def load_policy(text: str, source: str) -> GatePolicy:
    """Parse a policy file's ``text``; ``source`` (the path) names it in errors and answers.

    Raises:
        ConfigError: malformed YAML or an invalid field, one ``<source>:<line>: <field>:
            <problem>`` line per problem.
    """
    policy = load_yaml_model(text, source, GatePolicy, "a mapping with 'version' and 'rules'")
    return policy.model_copy(update={"source": source})
