"""Calibration, drift, escalation, thresholds, pass^k, recalibration (pure cores) and their queries
and writes (repo.py, write.py, reports.py, periodic.py).
"""
