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

**Floor** (:func:`labelling`, :func:`labels`): a judge labels items of a scope (the
conversation's agent x domain) only when the **lower end** of the 95 % Wilson interval of its
precision clears ``floor`` (default 0.7): precision must be known to be at least the floor, not
merely estimated at it. A scope with at least ``min_pairs`` (default 30) flagged conversations
with an outcome is decided by its own interval; a scope with fewer (or none), by the judge's
pooled interval over every scope. A judge with no flagged conversation with an outcome has no
interval and labels nothing: with every flag right, the lower end reaches 0.7 at 9 flags (2 of 2
gives 0.34), so a judge earns its labels. Its verdicts are stored and shown whatever the floor
says.

**Misclassification correction** (:func:`corrected_accuracy`): when items are labelled by a
judge whose sensitivity ``se`` (recall of failures) and specificity ``sp`` (share of successes
it leaves unflagged) are measured, the observed failure share ``q`` estimates ``se * f + (1 - sp)
* (1 - f)``; Rogan and Gladen (1978) invert it: ``f = (q + sp - 1) / (se + sp - 1)``, clipped to
[0, 1], undefined when ``se + sp <= 1`` (the judge is no better than chance).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from monitor.analytics.calibration import Proportion
from monitor.judges.agreement import agreement

DEFAULT_PRECISION_FLOOR = 0.7
DEFAULT_FLOOR_MIN_PAIRS = 30
ANY_DETERMINISTIC = "any deterministic (det.*)"
ANY_JUDGE = "any judge (labelling)"
#: the agent id of the pooled row of :func:`labelling` (a real agent id is never empty)
POOLED = ""


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
    agent_id: str = ""
    domain: str = ""  # "" also when the conversation has none

    @property
    def scope(self) -> tuple[str, str]:
        return (self.agent_id, self.domain)


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
    labels: bool = False  # the pooled decision (:func:`labelling`); False for other rows

    @property
    def key(self) -> tuple[str, str]:
        return (self.judge, self.judge_version)


def _quality(
    judge: str,
    version: str,
    category: str | None,
    pairs: Sequence[tuple[bool, bool]],
    labelled: bool = False,
) -> JudgeQuality:
    tp = sum(1 for f, y in pairs if f and y)
    fp = sum(1 for f, y in pairs if f and not y)
    fn = sum(1 for f, y in pairs if not f and y)
    tn = len(pairs) - tp - fp - fn
    # kappa on flagged (1) vs failed (1): the classes agree in meaning
    agree = agreement([int(f) for f, _ in pairs], [int(y) for _, y in pairs], min_pairs=1)
    return JudgeQuality(
        judge,
        version,
        category,
        len(pairs),
        tp,
        fp,
        fn,
        tn,
        Proportion.of(tp, tp + fp),
        Proportion.of(tp, tp + fn),
        Proportion.of(tn, tn + fp),
        agree.kappa,
        agree.reason,
        labelled,
    )


def labels(precision: Proportion, floor: float = DEFAULT_PRECISION_FLOOR) -> bool:
    """True when the lower end of ``precision``'s Wilson interval is at least ``floor`` (an
    unmeasured precision, no flagged conversation, never labels)."""
    return precision.low is not None and precision.low >= floor - 1e-12


@dataclass(frozen=True)
class ScopeLabelling:
    """Whether a judge labels the items of one scope, and the measurement behind it.

    ``agent_id`` :data:`POOLED` (with ``domain`` "") is the judge's pooled row over every
    scope. ``pairs`` = conversations with an outcome the judge applied to in the scope;
    ``precision`` = the scope's own (its ``n``: the flagged ones); ``decided_by`` = "scope" when
    its own interval decides (at least ``min_pairs`` flagged), else "pooled"."""

    judge: str
    judge_version: str
    agent_id: str
    domain: str
    pairs: int
    precision: Proportion
    recall: Proportion
    decided_by: str
    labels: bool

    @property
    def key(self) -> tuple[str, str]:
        return (self.judge, self.judge_version)

    @property
    def scope(self) -> tuple[str, str]:
        return (self.agent_id, self.domain)


@dataclass(frozen=True)
class ScopeCounts:
    """One judge (and version) in one scope: the conversations with an outcome it applied to
    (``pairs``), those it flagged, those that failed, and those both flagged and failed: all
    :func:`labelling` needs, so the store can sum them instead of listing conversations."""

    judge: str
    judge_version: str
    agent_id: str
    domain: str
    pairs: int
    flagged: int
    failed: int
    flagged_failed: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.judge, self.judge_version)

    @property
    def scope(self) -> tuple[str, str]:
        return (self.agent_id, self.domain)


def scope_counts(judgements: Iterable[ConversationJudgement]) -> list[ScopeCounts]:
    """The :class:`ScopeCounts` of ``judgements``, one per judge, version and scope."""
    acc: dict[tuple[str, str, str, str], list[int]] = {}
    for j in judgements:
        c = acc.setdefault((j.judge, j.judge_version, j.agent_id, j.domain), [0, 0, 0, 0])
        c[0] += 1
        c[1] += j.flagged
        c[2] += j.failed
        c[3] += j.flagged and j.failed
    return [ScopeCounts(*key, *c) for key, c in acc.items()]


def labelling(
    judgements: Iterable[ConversationJudgement],
    floor: float = DEFAULT_PRECISION_FLOOR,
    min_pairs: int = DEFAULT_FLOOR_MIN_PAIRS,
) -> list[ScopeLabelling]:
    """Per judge (and version): its pooled row, then one row per scope it applied to, ordered
    by judge, version, scope; each says whether the judge labels that scope's items (module
    docstring: the lower end of the deciding interval against ``floor``)."""
    return labelling_of_counts(scope_counts(judgements), floor, min_pairs)


def labelling_of_counts(
    counts: Iterable[ScopeCounts],
    floor: float = DEFAULT_PRECISION_FLOOR,
    min_pairs: int = DEFAULT_FLOOR_MIN_PAIRS,
) -> list[ScopeLabelling]:
    """:func:`labelling` from per-scope counts (several rows of one judge, version and scope
    add up); a row with no pairs is ignored."""
    by_judge: dict[tuple[str, str], dict[tuple[str, str], tuple[int, int, int, int]]] = {}
    for c in counts:
        if c.pairs <= 0:
            continue
        scopes = by_judge.setdefault(c.key, {})
        p, f, y, tp = scopes.get(c.scope, (0, 0, 0, 0))
        scopes[c.scope] = (p + c.pairs, f + c.flagged, y + c.failed, tp + c.flagged_failed)
    out: list[ScopeLabelling] = []
    for (name, version), scopes in sorted(by_judge.items()):
        every = tuple(map(sum, zip(*scopes.values(), strict=True)))
        pooled = _precision_recall(*every)
        pooled_labels = labels(pooled[0], floor)
        out.append(
            ScopeLabelling(name, version, POOLED, "", every[0], *pooled, "pooled", pooled_labels)
        )
        for (agent, domain), these in sorted(scopes.items()):
            precision, recall = _precision_recall(*these)
            own = precision.n >= min_pairs
            out.append(
                ScopeLabelling(
                    name,
                    version,
                    agent,
                    domain,
                    these[0],
                    precision,
                    recall,
                    "scope" if own else "pooled",
                    labels(precision, floor) if own else pooled_labels,
                )
            )
    return out


def _precision_recall(
    _pairs: int, flagged: int, failed: int, flagged_failed: int
) -> tuple[Proportion, Proportion]:
    return Proportion.of(flagged_failed, flagged), Proportion.of(flagged_failed, failed)


def labels_in(decisions: Iterable[ScopeLabelling]) -> Callable[[str, str, str, str], bool]:
    """``labels(judge, version, agent_id, domain)``: whether the judge labels that scope by
    ``decisions`` (a scope without its own row goes by the judge's pooled row; a judge
    without any row labels nothing), the rule the labelling SQL applies to stored rows."""
    table = {(d.judge, d.judge_version, d.agent_id, d.domain): d.labels for d in decisions}

    def decide(judge: str, version: str, agent_id: str, domain: str) -> bool:
        own = table.get((judge, version, agent_id, domain))
        if own is not None and agent_id != POOLED:
            return own
        return table.get((judge, version, POOLED, ""), False)

    return decide


def judge_quality(
    judgements: Iterable[ConversationJudgement],
    floor: float = DEFAULT_PRECISION_FLOOR,
    min_pairs: int = DEFAULT_FLOOR_MIN_PAIRS,
) -> list[JudgeQuality]:
    """Per judge (and version): one row for the judge (``labels``: its pooled decision), then
    one per category it used, ordered by judge, version, category; then, when any ``det.*``
    judge is present, one row :data:`ANY_DETERMINISTIC` ("any deterministic judge flagged the
    conversation", over the conversations at least one of them applied to, whether they label
    or not); last, when judges other than ``det.*`` are present too, one row :data:`ANY_JUDGE`
    ("a judge that labels the conversation's scope flagged it", :func:`labelling`)."""
    judgements = list(judgements)
    by_judge: dict[tuple[str, str], list[ConversationJudgement]] = {}
    any_det: dict[str, tuple[bool, bool]] = {}
    for j in judgements:
        by_judge.setdefault((j.judge, j.judge_version), []).append(j)
        if j.judge.startswith("det."):
            flagged, failed = any_det.get(j.conversation_id, (False, j.failed))
            any_det[j.conversation_id] = (flagged or j.flagged, failed)
    decisions = labelling(judgements, floor, min_pairs)
    pooled = {d.key: d.labels for d in decisions if d.agent_id == POOLED}
    out: list[JudgeQuality] = []
    for (name, version), js in sorted(by_judge.items()):
        out.append(
            _quality(
                name, version, None, [(j.flagged, j.failed) for j in js], pooled[(name, version)]
            )
        )
        for cat in sorted({c for j in js for c in j.categories}):
            pairs = [(cat in j.categories, j.failed) for j in js]
            out.append(_quality(name, version, cat, pairs))
    if any_det:
        out.append(_quality(ANY_DETERMINISTIC, "", None, list(any_det.values())))
    if any(not name.startswith("det.") for name, _ in by_judge):
        out.append(any_judge(judgements, labels_in(decisions)))
    return out


def any_judge(
    judgements: Iterable[ConversationJudgement], decide: Callable[[str, str, str, str], bool]
) -> JudgeQuality:
    """The row :data:`ANY_JUDGE` over the conversations any judge applied to: a judge's flag
    counts when ``decide(judge, version, agent_id, domain)`` says it labels that scope."""
    pairs: dict[str, tuple[bool, bool]] = {}
    for j in judgements:
        flagged, failed = pairs.get(j.conversation_id, (False, j.failed))
        counts = j.flagged and decide(j.judge, j.judge_version, j.agent_id, j.domain)
        pairs[j.conversation_id] = (flagged or counts, failed)
    return _quality(ANY_JUDGE, "", None, list(pairs.values()))


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
