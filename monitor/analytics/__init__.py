"""Calibration, drift, escalation, thresholds, pass^k, recalibration (pure cores) and their queries
and writes (repo.py, write.py, reports.py, periodic.py).
"""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "advisor",
    "alert_bounds",
    "bins",
    "calibration",
    "calibration_endpoint",
    "design_effect",
    "drift",
    "drift_policy",
    "drift_state",
    "drift_tests",
    "escalation",
    "examples",
    "periodic",
    "recalibration",
    "repo",
    "repo_escalation",
    "reports",
    "thresholds",
    "write",
)
