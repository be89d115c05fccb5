"""Judge quality against ground truth, at the conversation level (pure math, no I/O).

A judge is a detector of failures. For one judge (or one of its categories) the unit is a
**conversation** on which the judge gave at least one ok verdict with a label (it *applied*)
and whose outcome is known. The judge **flags** the conversation when one of its verdicts there
is a failure (label 0; for a category, a failure carrying that category). Positive class =
the conversation failed. Then, on those pairs:

- ``precision`` = failed among flagged (tp / (tp + fp)), with a Wilson interval on the flagged;
- ``recall`` = flagged among failed (tp / (tp + fn)), with a Wilson interval on the failed;
- Cohen's kappa of "flagged" against "failed" (:mod:`~.agreement`), and the confusion counts.

A passing check is *not* counted as "the judge says correct" (docs/analytics.md): it only
means "not flagged" on a conversation the judge looked at.

**Floor** (:func:`below_floor`): a judge whose precision is below ``floor`` (default 0.7), once
at least ``min_pairs`` (default 30) flagged conversations have an outcome, stops labelling items
(its verdicts are still stored and shown). Under ``min_pairs`` flags the precision is too
uncertain to act on and the judge keeps labelling.

**Misclassification correction** (:func:`corrected_accuracy`): when items are labelled by a
judge whose sensitivity ``se`` (recall of failures) and specificity ``sp`` (share of successes
it leaves unflagged) are measured, the observed failure share ``q`` estimates ``se * f + (1 - sp)
* (1 - f)``; Rogan and Gladen (1978) invert it: ``f = (q + sp - 1) / (se + sp - 1)``, clipped to
[0, 1], undefined when ``se + sp <= 1`` (the judge is no better than chance).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from monitor.analytics.calibration import Proportion
from monitor.judges.agreement import agreement

DEFAULT_PRECISION_FLOOR = 0.7
DEFAULT_FLOOR_MIN_PAIRS = 30
ANY_DETERMINISTIC = "any deterministic (det.*)"
ANY_JUDGE = "any judge (labelling)"


@dataclass(frozen=True)
class ConversationJudgement:
    """One judge on one conversation with an outcome: did it flag it (and under which
    categories), and did the conversation fail."""

    conversation_id: str
    judge: str
    judge_version: str
    flagged: bool
    categories: frozenset[str]
    failed: bool


@dataclass(frozen=True)
class JudgeQuality:
    """A judge (``category`` None) or one of its categories against conversation outcomes."""

    judge: str
    judge_version: str
    category: str | None
    pairs: int
    true_pos: int  # flagged, failed
    false_pos: int  # flagged, succeeded
    false_neg: int  # not flagged, failed
    true_neg: int  # not flagged, succeeded
    precision: Proportion
    recall: Proportion
    specificity: Proportion
    kappa: float | None
    kappa_note: str | None
    below_floor: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.judge, self.judge_version)


def _quality(
    judge: str,
    version: str,
    category: str | None,
    pairs: Sequence[tuple[bool, bool]],
    floor: float,
    min_pairs: int,
) -> JudgeQuality:
    tp = sum(1 for f, y in pairs if f and y)
    fp = sum(1 for f, y in pairs if f and not y)
    fn = sum(1 for f, y in pairs if not f and y)
    tn = len(pairs) - tp - fp - fn
    # kappa on flagged (1) vs failed (1): the classes agree in meaning
    agree = agreement([int(f) for f, _ in pairs], [int(y) for _, y in pairs], min_pairs=1)
    precision = Proportion.of(tp, tp + fp)
    return JudgeQuality(
        judge,
        version,
        category,
        len(pairs),
        tp,
        fp,
        fn,
        tn,
        precision,
        Proportion.of(tp, tp + fn),
        Proportion.of(tn, tn + fp),
        agree.kappa,
        agree.reason,
        below_floor(precision, floor, min_pairs) if category is None else False,
    )


def below_floor(
    precision: Proportion,
    floor: float = DEFAULT_PRECISION_FLOOR,
    min_pairs: int = DEFAULT_FLOOR_MIN_PAIRS,
) -> bool:
    """True when ``precision`` is measured on at least ``min_pairs`` flagged conversations
    and is below ``floor`` (the judge then stops labelling items)."""
    return precision.n >= min_pairs and precision.value is not None and precision.value < floor


def judge_quality(
    judgements: Iterable[ConversationJudgement],
    floor: float = DEFAULT_PRECISION_FLOOR,
    min_pairs: int = DEFAULT_FLOOR_MIN_PAIRS,
) -> list[JudgeQuality]:
    """Per judge (and version): one row for the judge, then one per category it used, ordered
    by judge, version, category; then, when any ``det.*`` judge is present, one row
    :data:`ANY_DETERMINISTIC` ("any deterministic judge flagged the conversation", over the
    conversations at least one of them applied to; never below the floor); last, when judges
    other than ``det.*`` are present too, one row :data:`ANY_JUDGE` (:func:`_any_judge`)."""
    by_judge: dict[tuple[str, str], list[ConversationJudgement]] = {}
    any_det: dict[str, tuple[bool, bool]] = {}
    for j in judgements:
        by_judge.setdefault((j.judge, j.judge_version), []).append(j)
        if j.judge.startswith("det."):
            flagged, failed = any_det.get(j.conversation_id, (False, j.failed))
            any_det[j.conversation_id] = (flagged or j.flagged, failed)
    out: list[JudgeQuality] = []
    for (name, version), js in sorted(by_judge.items()):
        out.append(
            _quality(name, version, None, [(j.flagged, j.failed) for j in js], floor, min_pairs)
        )
        for cat in sorted({c for j in js for c in j.categories}):
            pairs = [(cat in j.categories, j.failed) for j in js]
            out.append(_quality(name, version, cat, pairs, floor, min_pairs))
    if any_det:
        out.append(_quality(ANY_DETERMINISTIC, "", None, list(any_det.values()), 0.0, 1))
    if any(not name.startswith("det.") for name, _ in by_judge):
        muted = {r.key for r in out if r.category is None and r.below_floor}
        out.append(_any_judge(by_judge, muted))
    return out


def _any_judge(
    by_judge: dict[tuple[str, str], list[ConversationJudgement]], muted: set[tuple[str, str]]
) -> JudgeQuality:
    """The row "a judge that labels items flagged the conversation", over the conversations any
    judge applied to; a judge in ``muted`` (below the floor: it stops labelling items) counts as
    not flagging."""
    pairs: dict[str, tuple[bool, bool]] = {}
    for key, js in by_judge.items():
        for j in js:
            flagged, failed = pairs.get(j.conversation_id, (False, j.failed))
            pairs[j.conversation_id] = (flagged or (j.flagged and key not in muted), failed)
    return _quality(ANY_JUDGE, "", None, list(pairs.values()), 0.0, 1)


@dataclass(frozen=True)
class CorrectedAccuracy:
    """Raw accuracy of judge-labelled items and the Rogan-Gladen corrected one."""

    raw: float
    corrected: float | None
    note: str | None


def corrected_accuracy(
    raw_accuracy: float, sensitivity: float | None, specificity: float | None
) -> CorrectedAccuracy:
    """Correct the accuracy measured on judge labels for the judge's error rates (module
    docstring): failure share ``q = 1 - raw``; ``sensitivity`` = the judge's recall of
    failures, ``specificity`` = its share of successes left unflagged."""
    if sensitivity is None or specificity is None:
        return CorrectedAccuracy(raw_accuracy, None, "the judge's error rates are not measured")
    youden = sensitivity + specificity - 1.0
    if youden <= 0:
        return CorrectedAccuracy(
            raw_accuracy, None, "the judge is no better than chance (se + sp <= 1)"
        )
    q = 1.0 - raw_accuracy
    f = min(max((q + specificity - 1.0) / youden, 0.0), 1.0)
    return CorrectedAccuracy(raw_accuracy, 1.0 - f, None)
