"""Agents built from real model answers: resampled stated confidences and their correctness.

Pure (numpy, no I/O): the caller reads the answers file
(``tests/data/answers/stated_confidence_answers.csv``, columns
``pool,question_id,confidence,correct``) and passes its text to :func:`parse_pools`.

A *pool* is one model's answers on one benchmark. An agent answers with a :class:`Mixture` of
pools: each answer comes from pool ``k`` with probability ``p_k`` and is a uniformly drawn
answer of that pool (confidence and correctness kept together). The calibration of a mixture's
answer population is exact (:func:`population_metric`), so :func:`tune` can place an agent at a
chosen distance from a rule's threshold while every answer it gives is a real one. An agent may
switch mixture at given times (:class:`AnswerAgent`): a real change of its answers.

:func:`answer_items` draws an agent's answers over a time range (``per_hour`` a hour, evenly
spread with jitter, seeded); :func:`answer_events` turns them into agent-event/v1 events (one
conversation per answer: an assistant message with the stated confidence, then its outcome).
"""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

import numpy as np

from monitor.contract.events import Agent, AgentEvent, Context, MessagePayload, OutcomePayload

METRICS = ("ece", "brier", "overconfidence_gap", "accuracy")


@dataclass(frozen=True)
class Pool:
    """One model's answers on one benchmark: stated confidences and 0/1 correctness."""

    name: str
    conf: np.ndarray
    y: np.ndarray


def parse_pools(text: str) -> dict[str, Pool]:
    """Pools of an answers CSV (``pool,question_id,confidence,correct``), by name.

    Raises ValueError on a missing column, a confidence outside [0, 1] or a label not 0/1."""
    rows = csv.DictReader(io.StringIO(text))
    acc: dict[str, tuple[list[float], list[float]]] = {}
    for i, row in enumerate(rows, start=2):
        try:
            name, c, y = row["pool"], float(row["confidence"]), row["correct"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"line {i}: {exc}") from exc
        if not 0.0 <= c <= 1.0 or y not in ("0", "1"):
            raise ValueError(f"line {i}: confidence {c} / correct {y!r} out of range")
        confs, ys = acc.setdefault(name, ([], []))
        confs.append(c)
        ys.append(float(y))
    return {k: Pool(k, np.array(c), np.array(y)) for k, (c, y) in acc.items()}


@dataclass(frozen=True)
class Mixture:
    """Probabilities of drawing from each pool (they sum to 1)."""

    weights: tuple[tuple[str, float], ...]

    def __post_init__(self) -> None:
        total = sum(p for _, p in self.weights)
        if not self.weights or abs(total - 1.0) > 1e-9 or any(p < -1e-12 for _, p in self.weights):
            raise ValueError(f"mixture weights must be >= 0 and sum to 1, got {self.weights}")

    @classmethod
    def of(cls, a: str, b: str, p: float) -> Mixture:
        """``p`` of pool ``a``, ``1 - p`` of pool ``b``."""
        return cls(((a, p), (b, 1.0 - p)))

    def blend(self, other: Mixture, p: float) -> Mixture:
        """``p`` of ``other``, ``1 - p`` of this mixture."""
        out: dict[str, float] = {}
        for k, q in self.weights:
            out[k] = out.get(k, 0.0) + (1.0 - p) * q
        for k, q in other.weights:
            out[k] = out.get(k, 0.0) + p * q
        return Mixture(tuple(sorted(out.items())))


def population_metric(metric: str, pools: dict[str, Pool], mix: Mixture, n_bins: int = 10) -> float:
    """``metric`` (one of :data:`METRICS`) of the mixture's answer population (10 equal-width
    bins for ECE, as the monitor's)."""
    conf = np.concatenate([pools[k].conf for k, p in mix.weights if p > 0])
    y = np.concatenate([pools[k].y for k, p in mix.weights if p > 0])
    w = np.concatenate(
        [np.full(len(pools[k].conf), p / len(pools[k].conf)) for k, p in mix.weights if p > 0]
    )
    if metric == "accuracy":
        return float((w * y).sum())
    if metric == "overconfidence_gap":
        return float((w * (conf - y)).sum())
    if metric == "brier":
        return float((w * (conf - y) ** 2).sum())
    if metric != "ece":
        raise ValueError(f"unknown metric {metric!r}")
    b = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for k in range(n_bins):
        m = b == k
        if m.any():
            total += abs(float((w[m] * (conf[m] - y[m])).sum()))
    return total


def tune(
    pools: dict[str, Pool],
    low: Mixture,
    high: Mixture,
    metric: str,
    target: float,
    step: float = 0.0025,
) -> Mixture:
    """The blend of ``low`` and ``high`` (:meth:`Mixture.blend`) whose ``metric`` is closest to
    ``target`` (grid of ``step`` over the share of ``high``)."""
    grid = [min(1.0, float(p)) for p in np.arange(0.0, 1.0 + step / 2, step)]
    best = min(
        grid, key=lambda p: abs(population_metric(metric, pools, low.blend(high, p)) - target)
    )
    return low.blend(high, best)


@dataclass(frozen=True)
class AnswerAgent:
    """An agent answering from ``phases``: ``(since, mixture)`` pairs, the first with ``since``
    None (from the start), later ones switching at ``since``."""

    id: str
    tier: Literal[1, 2, 3]
    domain: str
    phases: tuple[tuple[datetime | None, Mixture], ...]

    def mixture_at(self, at: datetime) -> Mixture:
        """The mixture in force at ``at``."""
        current = self.phases[0][1]
        for since, mix in self.phases[1:]:
            if since is not None and at >= since:
                current = mix
        return current


def answer_items(
    agent: AnswerAgent,
    pools: dict[str, Pool],
    start: datetime,
    end: datetime,
    per_hour: float,
    seed: int,
) -> list[tuple[datetime, float, int]]:
    """``(time, confidence, correct)`` of the agent's answers in ``[start, end)``: ``per_hour``
    a hour on an even grid, each jittered within its slot; deterministic for ``seed``."""
    rng = random.Random(f"{seed}:{agent.id}")
    gap = timedelta(hours=1) / per_hour
    out = []
    t = start
    while t < end:
        at = t + gap * rng.random()
        mix = agent.mixture_at(at)
        names = [k for k, _ in mix.weights]
        pool = pools[rng.choices(names, [p for _, p in mix.weights])[0]]
        i = rng.randrange(len(pool.conf))
        out.append((at, float(pool.conf[i]), int(pool.y[i])))
        t += gap
    return out


def answer_events(
    agent: AnswerAgent, items: Sequence[tuple[datetime, float, int]], run: str
) -> list[AgentEvent]:
    """agent-event/v1 events of ``items``: per answer a conversation ``{run}-{agent}-{i}`` with
    an assistant message (the stated confidence) and, one second later, its outcome."""
    ctx = Context(domain=agent.domain, tier=agent.tier)
    who = Agent(id=agent.id)
    out: list[AgentEvent] = []
    for i, (at, conf, y) in enumerate(items):
        cid = f"{run}-{agent.id}-{i:06d}"
        out.append(
            AgentEvent(
                event_id=f"{cid}:0",
                type="message",
                ts=at,
                conversation_id=cid,
                agent=who,
                context=ctx,
                turn=0,
                message=MessagePayload(
                    role="assistant",
                    content="answer",
                    confidence=conf,
                    confidence_source="verbalized",
                ),
            )
        )
        out.append(
            AgentEvent(
                event_id=f"{cid}:1",
                type="outcome",
                ts=at + timedelta(seconds=1),
                conversation_id=cid,
                agent=who,
                context=ctx,
                outcome=OutcomePayload(success=bool(y), source="ground_truth"),
            )
        )
    return out
