"""Agent reliability monitor: calibration, drift and escalation analytics for production agents."""

__version__ = "0.1.0"
