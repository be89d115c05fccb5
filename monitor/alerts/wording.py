"""What a resolved notification says: what resolved it, not the firing wording again.

Pure. A rule's ``summary`` template is written for the firing alert ("ECE {value} above
{threshold}"); reused for the resolution it read "RESOLVED: ECE 0.079 above 0.08". The
resolution instead says the value that resolved it, on which side of the threshold it is back,
and how long the alert had fired: ``ECE 0.079, back under 0.08 for billing (tier 3) after
10 min firing``. Detection metrics (drift, escalation inversion: 1.0 when detected) say
``no longer detected``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

LABELS: Mapping[str, str] = {
    "ece": "ECE",
    "mce": "MCE",
    "brier": "Brier score",
    "accuracy": "Accuracy",
    "overconfidence_gap": "Overconfidence gap",
    "drift": "Drift",
    "escalation_inversion": "Escalation inversion",
    "time_to_escalation_p90_s": "Time to escalation p90 (s)",
    "judge_failure_rate": "Judge failure rate",
    "dlq_rate": "Dead-letter rate",
    "consumer_lag": "Consumer lag",
}
DETECTIONS = frozenset({"drift", "escalation_inversion"})


def span(duration: timedelta) -> str:
    """``duration`` for reading: ``45 s``, ``10 min``, ``2 h 5 min``, ``3 d 4 h``."""
    seconds = max(0, round(duration.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def scope_text(scope: Mapping[str, str]) -> str:
    """``billing (tier 3)``, ``billing / retail``, ``all agents (tier 2)``."""
    who = scope.get("agent") or "all agents"
    if scope.get("domain"):
        who += f" / {scope['domain']}"
    return who + (f" (tier {scope['tier']})" if scope.get("tier") else "")


def resolved_summary(
    metric: str,
    comparison: str,
    threshold: float,
    value: float | None,
    scope: Mapping[str, str],
    fired_for: timedelta,
) -> str:
    """The summary of a resolved notification (see the module docstring).

    ``comparison`` is the rule's breach condition (``>``, ``>=``, ``<``, ``<=``): a value that
    no longer breaches ``>`` is back under the threshold, one that no longer breaches ``<``
    is back above it.
    """
    label = LABELS.get(metric, metric)
    who = scope_text(scope)
    after = f"after {span(fired_for)} firing"
    if metric in DETECTIONS:
        return f"{label} no longer detected for {who} {after}"
    side = "under" if comparison.startswith(">") else "above"
    shown = "n/a" if value is None else f"{value:.4g}"
    return f"{label} {shown}, back {side} {threshold:g} for {who} {after}"


def flapping_summary(
    rule: str,
    scope: Mapping[str, str],
    changed: int,
    slots: int,
    slot: timedelta,
    share: float,
    start: float,
    stop: float,
) -> str:
    """The summary of a flapping notification: that it flaps, why, and until when it is held."""
    return (
        f"{rule} for {scope_text(scope)} is flapping: it started or stopped firing in {changed} "
        f"of the last {slots} {span(slot)} slots (weighted share {share:.2f} >= {start:.2f}); "
        f"its notifications are held until the share falls below {stop:.2f}"
    )
