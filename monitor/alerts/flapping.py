"""Flap detection: the weighted share of recent time slots in which an alert changed state.

Pure. Nagios and Icinga mark a check flapping from the share of state changes over its last
21 results, weighting recent ones more. Alert evaluations run every few seconds to minutes, so
the history here is counted in time slots instead (:class:`monitor.alerts.rule_models.FlapPolicy`):
the last ``window`` is cut into ``slots`` slots ending at ``now``; a slot is *changed* when the
alert started or stopped firing in it; slot weights rise linearly from 0.8 (oldest) to 1.2
(newest), and the share is the weight of the changed slots over the total weight (0 to 1).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from monitor.alerts.rule_models import FlapPolicy


def flap_share(changes: Iterable[datetime], now: datetime, policy: FlapPolicy) -> float:
    """The weighted share of ``policy``'s slots ending at ``now`` holding a change.

    Changes at ``now`` or later count in the newest slot; those older than the window are
    ignored."""
    n = policy.slots
    changed = set()
    for at in changes:
        age = now - at
        if age >= policy.slot * n:
            continue
        back = max(0, int(age // policy.slot))
        changed.add(n - 1 - back)
    weights = [0.8 + 0.4 * i / (n - 1) if n > 1 else 1.0 for i in range(n)]
    return sum(weights[i] for i in changed) / sum(weights)


def changed_slots(changes: Iterable[datetime], now: datetime, policy: FlapPolicy) -> int:
    """How many of the window's slots hold a change (the unweighted count, for messages)."""
    n = policy.slots
    return len(
        {int(max(0, (now - at) // policy.slot)) for at in changes if now - at < policy.slot * n}
    )
