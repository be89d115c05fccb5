"""What the report shows, computed once by :mod:`monitor.report.write` and rendered by
:mod:`monitor.report.html` (a plain value; its own module so that the two do not import each
other)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitor.analytics import reports as fa
from monitor.analytics.calibration import CalibrationReport
from monitor.analytics.repo import Segment
from monitor.analytics.thresholds import Recommendation, ThresholdTable
from monitor.gate.effect import Effect
from monitor.report.examples import Shown
from monitor.store.replica import ReadSource


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows, computed once."""

    segment: Segment
    start: datetime
    end: datetime
    calibration: dict[str, CalibrationReport]
    ece_series: dict[str, list[tuple[datetime, float]]]
    escalation: dict[str, fa.EscalationSummary]
    thresholds: dict[str, tuple[ThresholdTable, Recommendation]]
    drift: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    gate: list[Effect] = field(default_factory=list)  # recorded gate decisions per agent x domain
    source: ReadSource = field(default_factory=lambda: ReadSource(standby=False))  # server read
    incidents: list[dict[str, Any]] = field(default_factory=list)  # overlapping the range
    # per agent to act on, its worst conversations (monitor.report.examples)
    examples: Mapping[str, Sequence[Shown]] = field(default_factory=dict)
