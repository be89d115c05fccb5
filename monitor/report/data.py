"""What the report shows, computed once by :mod:`monitor.report.write` and rendered by
:mod:`monitor.report.html` (a plain value; its own module so that the two do not import each
other)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from monitor.analytics import reports as fa
from monitor.analytics.calibration import CalibrationReport
from monitor.analytics.repo import Segment
from monitor.analytics.thresholds import Recommendation, ThresholdTable


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
