"""Sampling configuration: the stable hash, strata with their rates, always-sample rules.

Pure: no I/O library, nothing read from the environment or from files (``from_yaml`` parses a
string the caller already has). :mod:`monitor.sampling.policy` builds the per-conversation
decision and
the weighted estimators on top of this module; import the public names from there.

The hash (``hash_unit``) is specified exactly so that any worker, any replay, or another language
reproduces it: BLAKE2b with an 8-byte digest over the UTF-8 bytes of the conversation id, keyed by
the UTF-8 bytes of the salt (empty salt = unkeyed); the digest read as a big-endian unsigned
64-bit integer; its top 53 bits divided by 2**53. The result is a float in [0, 1) that never
rounds up to 1.0, so ``hash_unit(cid) < rate`` is never true at rate 0 and always true at rate 1.
Python's ``hash()`` is deliberately not used: it is randomised per process (PYTHONHASHSEED).

Every stratum shares the same hash, so samples are nested: raising a rate only adds
conversations, lowering it only drops some.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from monitor.core.errors import ConfigError
from monitor.core.yaml_config import load_yaml_model

_GLOB_CHARS = frozenset("*?[")
_MAX_SALT_BYTES = 64  # the BLAKE2b key limit
UnitInterval = Annotated[float, Field(ge=0.0, le=1.0)]  # a rate or a confidence


def hash_unit(conversation_id: str, salt: str = "") -> float:
    """Map a conversation id to a uniform-looking float in [0, 1), identically in every process.

    Contract: deterministic across processes, machines and Python versions (see the module
    docstring for the exact algorithm); ``0.0 <= result < 1.0``; a different ``salt`` gives an
    independent-looking sequence. Raises ValueError when the salt is over 64 UTF-8 bytes.
    """
    key = salt.encode()
    if len(key) > _MAX_SALT_BYTES:
        raise ValueError(f"salt is {len(key)} UTF-8 bytes; at most {_MAX_SALT_BYTES} allowed")
    digest = hashlib.blake2b(conversation_id.encode(), digest_size=8, key=key).digest()
    return (int.from_bytes(digest, "big") >> 11) / 9007199254740992.0  # 2**53


class Reason(StrEnum):
    """Why a conversation is sampled. ``RATE`` is the probability sample; the rest are rules."""

    RATE = "rate"
    ESCALATION = "escalation"
    LOW_CONFIDENCE = "low_confidence"
    FAILED_TOOL_CALL = "failed_tool_call"
    NEGATIVE_FEEDBACK = "negative_feedback"


class _Config(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class AlwaysSampleRules(_Config):
    """Conditions that put a conversation in the sample whatever its stratum's rate.

    Each is evaluated on the conversation's own events only (never on judge output or on the
    sample), so it is decidable for every conversation, sampled or not. Thresholds are strict:
    a confidence exactly at the floor, or a score exactly at ``negative_feedback_below``, does
    not fire. ``None`` turns a threshold rule off; ``False`` turns a flag rule off.
    """

    escalation: bool = Field(default=True, description="Any escalation event.")
    confidence_floor: UnitInterval | None = Field(
        default=None, description="An assistant message with confidence below this."
    )
    failed_tool_call: bool = Field(default=True, description="Any tool_result with ok=false.")
    negative_feedback_below: Annotated[float, Field(ge=-1.0, le=1.0)] | None = Field(
        default=0.0, description="A feedback score below this (default: any negative score)."
    )

    def reasons(
        self,
        *,
        escalated: bool,
        min_confidence: float | None,
        failed_tool_call: bool,
        min_feedback: float | None,
    ) -> tuple[Reason, ...]:
        """The rules that fire for these conversation facts, in ``Reason`` declaration order."""
        fired: list[Reason] = []
        if self.escalation and escalated:
            fired.append(Reason.ESCALATION)
        floor = self.confidence_floor
        if floor is not None and min_confidence is not None and min_confidence < floor:
            fired.append(Reason.LOW_CONFIDENCE)
        if self.failed_tool_call and failed_tool_call:
            fired.append(Reason.FAILED_TOOL_CALL)
        limit = self.negative_feedback_below
        if limit is not None and min_feedback is not None and min_feedback < limit:
            fired.append(Reason.NEGATIVE_FEEDBACK)
        return tuple(fired)


class StratumRule(_Config):
    """One stratum: which conversations it covers and the rate at which they are sampled.

    ``agent`` is a case-sensitive glob over ``agent.id`` (``*`` = any agent); ``domain`` and
    ``tier`` are exact matches, ``None`` = any. ``name`` labels the stratum in decisions
    (default: its constrained fields, e.g. ``agent=billing-*/tier=1``).
    """

    agent: str = Field(default="*", min_length=1)
    domain: str | None = None
    tier: Literal[1, 2, 3] | None = None
    rate: UnitInterval
    name: str | None = Field(default=None, min_length=1)

    def matches(self, agent_id: str | None, domain: str | None, tier: int | None) -> bool:
        """True when a conversation with these attributes falls in this stratum.

        An unknown (``None``) attribute only matches an unconstrained field.
        """
        if self.agent != "*" and (agent_id is None or not fnmatchcase(agent_id, self.agent)):
            return False
        if self.domain is not None and domain != self.domain:
            return False
        return self.tier is None or tier == self.tier

    @property
    def specificity(self) -> tuple[int, int, int]:
        """Sort key, larger = more specific: (constrained fields, agent is literal, literal chars).

        So ``agent + tier`` beats ``tier`` alone, and ``billing-eu`` beats ``billing-*``.
        """
        constrained = (self.agent != "*") + (self.domain is not None) + (self.tier is not None)
        literal_chars = sum(ch not in _GLOB_CHARS for ch in self.agent) if self.agent != "*" else 0
        literal = self.agent != "*" and not (_GLOB_CHARS & set(self.agent))
        return constrained, int(literal), literal_chars

    @property
    def label(self) -> str:
        """``name`` if set, else ``agent=.../domain=.../tier=...`` over the constrained fields."""
        if self.name is not None:
            return self.name
        parts = [f"agent={self.agent}"] if self.agent != "*" else []
        if self.domain is not None:
            parts.append(f"domain={self.domain}")
        if self.tier is not None:
            parts.append(f"tier={self.tier}")
        return "/".join(parts) or "*"


class Stratum(NamedTuple):
    """The stratum a conversation falls in: its label and sampling rate."""

    name: str
    rate: float


DEFAULT_STRATUM = "default"


class SamplingPolicy(_Config):
    """The whole sampling configuration (immutable; validation errors name the field).

    - ``default_rate``: the rate of conversations no stratum rule matches (default 1.0, i.e.
      sample everything until configured otherwise).
    - ``strata``: stratum rules. The most specific matching rule wins (see
      ``StratumRule.specificity``); among equally specific matches, the first declared wins.
      Two rules with the same (agent, domain, tier) or the same label are rejected.
    - ``always_sample``: the always-sample rules.
    - ``salt``: keys the hash (at most 64 UTF-8 bytes). Changing it re-draws every decision.
    """

    default_rate: UnitInterval = 1.0
    strata: tuple[StratumRule, ...] = Field(default=(), strict=False)  # YAML gives a list
    always_sample: AlwaysSampleRules = Field(default_factory=AlwaysSampleRules)
    salt: str = ""

    _ordered: tuple[StratumRule, ...] = PrivateAttr(default=())
    _cache: dict[tuple[str | None, str | None, int | None], Stratum] = PrivateAttr(
        default_factory=dict
    )

    @model_validator(mode="after")
    def _check(self) -> SamplingPolicy:
        if len(self.salt.encode()) > _MAX_SALT_BYTES:
            raise ValueError(f"salt: at most {_MAX_SALT_BYTES} UTF-8 bytes")
        seen_keys: dict[tuple[str, str | None, int | None], int] = {}
        seen_labels: dict[str, int] = {DEFAULT_STRATUM: -1}
        for i, rule in enumerate(self.strata):
            key = (rule.agent, rule.domain, rule.tier)
            if key in seen_keys:
                raise ValueError(f"strata.{i}: same agent/domain/tier as strata.{seen_keys[key]}")
            if rule.label in seen_labels:
                raise ValueError(f"strata.{i}: stratum name {rule.label!r} is already used")
            seen_keys[key] = i
            seen_labels[rule.label] = i
        return self

    def model_post_init(self, context: Any, /) -> None:
        """Order the rules most-specific-first (stable: declaration order breaks ties)."""
        self._ordered = tuple(sorted(self.strata, key=lambda r: r.specificity, reverse=True))

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any] | None, source: str = "sampling"
    ) -> SamplingPolicy:
        """Validate a YAML/JSON-shaped mapping (``None`` = all defaults).

        Raises:
            ConfigError: naming ``source`` and the dotted path of the first bad field, e.g.
                ``sampling: strata.1.rate: Input should be less than or equal to 1``.
        """
        try:
            return cls.model_validate(dict(data or {}))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            where = f"{loc}: " if loc and not msg.startswith(f"{loc}") else ""
            value = err.get("input")
            got = f" (got {value!r})" if isinstance(value, str | int | float) else ""
            raise ConfigError(f"{source}: {where}{msg}{got}") from None

    @classmethod
    def from_yaml(cls, text: str, source: str = "sampling") -> SamplingPolicy:
        """Parse YAML text (already read by the caller) and validate it.

        Raises ConfigError with one ``<source>:<line>: <field>: <problem>`` line per problem
        (:func:`monitor.core.yaml_config.load_yaml_model`), e.g.
        ``sampling.yaml:4: strata[1].rate: Input should be less than or equal to 1``.
        """
        return load_yaml_model(text, source, cls, "a mapping")

    def stratum_for(self, agent_id: str | None, domain: str | None, tier: int | None) -> Stratum:
        """The stratum (label, rate) of a conversation with these attributes (memoised)."""
        key = (agent_id, domain, tier)
        found = self._cache.get(key)
        if found is None:
            rule = next((r for r in self._ordered if r.matches(agent_id, domain, tier)), None)
            found = (
                Stratum(DEFAULT_STRATUM, self.default_rate)
                if rule is None
                else Stratum(rule.label, rule.rate)
            )
            if len(self._cache) < 100_000:
                self._cache[key] = found
        return found

    def digest(self) -> str:
        """A short stable fingerprint of the policy, to store next to the decisions it made."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(canonical.encode(), digest_size=8).hexdigest()
