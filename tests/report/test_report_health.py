"""The report's health level per agent: the first rule that holds decides, with its one reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from monitor.analytics.bins import BinSums
from monitor.analytics.calibration import CalibrationReport, calibration_report
from monitor.report.health import agents_health, health_for

T = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def report(gap: float, n: int = 2000) -> CalibrationReport:
    """A calibration report of ``n`` items at confidence 0.8 with accuracy 0.8 - gap."""
    rng = np.random.default_rng(1)
    conf = np.full(n, 0.8)
    y = (rng.uniform(size=n) < 0.8 - gap).astype(float)
    return calibration_report(BinSums.from_items(conf, y))


def check(
    fired: bool, minutes: int, agent: str = "a", tests: list[str] | None = None
) -> dict[str, Any]:
    return {
        "agent_id": agent,
        "recent_to": T + timedelta(minutes=minutes),
        "fired": fired,
        "fired_tests": tests or (["psi"] if fired else []),
    }


def alert(severity: str, rule: str = "ece_tier3", agent: str = "a") -> dict[str, Any]:
    return {"agent_id": agent, "severity": severity, "rule": rule, "summary": f"{rule} breached"}


def test_each_rule_in_order() -> None:
    good = report(0.0)
    assert good.meaningful and good.ece < 0.05
    v = health_for("a", good, True, [check(True, 0)], [alert("critical"), alert("warning")])
    assert (v.level, v.reason) == ("act", "critical alert ece_tier3: ece_tier3 breached")
    v = health_for("a", good, True, [check(True, 0)], [alert("warning")])
    assert v.level == "act" and "inversion" in v.reason
    v = health_for("a", good, False, [check(False, 0), check(True, 10, tests=["ks", "psi"])], [])
    assert (v.level, v.reason) == ("act", "drift in the latest check (to 12:10 UTC): ks, psi")
    bad = report(0.2)
    assert bad.ece_ci[0] >= 0.1
    v = health_for("a", bad, False, [], [])
    assert v.level == "act" and v.reason.startswith(
        f"ECE {bad.ece:.3f}, at least {bad.ece_ci[0]:.3f} (95% interval; act at 0.1)"
    )
    noisy = report(0.12, n=120)  # above 0.1, but the interval reaches below it: watch
    assert noisy.meaningful and noisy.ece >= 0.1 and noisy.ece_ci[0] < 0.1, noisy.ece_ci
    assert health_for("a", noisy, False, [], []).level == "watch"
    v = health_for("a", good, False, [], [alert("warning", "brier_tier3")])
    assert (v.level, v.reason) == ("watch", "warning alert brier_tier3: brier_tier3 breached")
    v = health_for("a", good, False, [check(True, 0), check(False, 10)], [])
    assert (v.level, v.reason) == ("watch", "drift fired at 12:00 UTC, not in the latest check")
    middling = report(0.07)
    assert 0.05 <= middling.ece < 0.1
    assert health_for("a", middling, False, [], []).level == "watch"
    v = health_for("a", report(0.0, n=20), False, [], [])
    assert v.level == "watch" and v.reason.startswith("calibration cannot be judged yet")
    v = health_for("a", good, False, [check(False, 0)], [])
    assert (v.level, v.reason) == (
        "healthy",
        f"ECE {good.ece:.3f} on 2,000 items; no firing alert, no drift",
    )


def test_health_covers_every_agent_most_urgent_first() -> None:
    found = agents_health(
        {"*": report(0.1), "b": report(0.0), "c": report(0.2)},
        {"b": False},
        [check(True, 5, agent="d")],
        [alert("warning", agent="e")],
    )
    assert [(v.agent, v.level) for v in found] == [
        ("c", "act"),
        ("d", "act"),
        ("e", "watch"),
        ("b", "healthy"),
    ]
