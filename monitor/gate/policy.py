"""The gate policy: thresholds, inline checks and what they do, per agent/domain/tier (pure).

A policy is YAML (docs/gate.md), validated with :func:`monitor.core.yaml_config.load_yaml_model`
so every error names ``file:line: field``::

    version: "2026-11-23"        # policy_version in every answer and decision event
    rules:                       # the first rule matching (agent, domain, tier) applies
      - agent: support-bot       # "*" (default) = any agent
        domain: airline          # "*" (default) = any domain (also none)
        tier: 3                  # omitted = any tier
        threshold: 0.8           # calibrated confidence below it -> below_threshold
        below_threshold: escalate  # or revise
        checks: [det.authorization, det.ignored_error, domain]  # "domain" = domain plugins
        on_check_failure: revise # or escalate
        fail: open               # open: proceed / closed: escalate, when undecidable in time
        deadline_ms: 50

An agent no rule matches is *unknown* to the gate (the endpoint answers 404). Without a policy
file the built-in :data:`DEFAULT_POLICY` applies: one rule for every agent, threshold 0.5,
every deterministic check inline, fail open.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from monitor.core.yaml_config import load_yaml_model

#: The deterministic judges a rule may run inline, plus ``domain`` (the domain plugins' checks).
DETERMINISTIC_CHECKS: tuple[str, ...] = (
    "det.authorization",
    "det.repeated_call",
    "det.ignored_error",
    "det.unsupported_figure",
)
DOMAIN_CHECKS = "domain"
KNOWN_CHECKS: tuple[str, ...] = (*DETERMINISTIC_CHECKS, DOMAIN_CHECKS)

Action = Literal["revise", "escalate"]
FailMode = Literal["open", "closed"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GateRule(_Strict):
    """One rule: which traffic it covers and how the gate decides for it."""

    agent: str = Field(default="*", min_length=1)
    domain: str = Field(default="*", min_length=1)
    tier: Literal[1, 2, 3] | None = None
    threshold: Annotated[float, Field(ge=0.0, le=1.0)]
    below_threshold: Action = "escalate"
    checks: tuple[str, ...] = KNOWN_CHECKS
    on_check_failure: Action = "revise"
    fail: FailMode = "open"
    deadline_ms: Annotated[float, Field(gt=0.0, le=60_000.0)] = 50.0

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
