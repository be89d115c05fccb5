"""The runtime trust gate's settings (``MONITOR_GATE_*``; docs/gate.md).

:class:`GateSettings` is a base of :class:`monitor.config.Settings`, which alone reads them from
the environment; they are declared here so that the settings module stays short.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from monitor.core.fields import positive, secret, unset


class GateSettings(BaseModel):
    """POST /v1/gate: token, policy, limits, map refresh and the decision events' disk buffer
    (a base of ``Settings``; validated with it)."""

    gate_host: str = Field(
        default="127.0.0.1", description="Address `monitor gate serve` listens on."
    )
    gate_port: int = Field(
        default=6067,
        ge=0,
        le=65535,
        description="Port of `monitor gate serve` (bound with SO_REUSEPORT: several gate "
        "processes may serve one port).",
    )
    gate_token: str | None = secret(
        "Shared bearer token of POST /v1/gate (separate from the ingest token). Unset: API keys "
        "with the gate scope, and requests from the loopback address."
    )
    gate_policy_file: Path | None = unset(
        "YAML gate policy (thresholds, inline checks, fail open/closed per "
        "agent/domain/tier). Unset: the built-in policy (threshold 0.5, every deterministic "
        "check, fail open)."
    )
    gate_max_content_chars: int = Field(
        default=32_000,
        ge=1,
        description="Longest message content the gate checks, in characters (413 above).",
    )
    gate_max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="Largest POST /v1/gate body in bytes (413 above; 1 MiB).",
    )
    gate_refresh_s: float = positive(
        30.0,
        "Seconds between the gate's reloads of the calibration maps it "
        "holds in memory (a newly fitted map is used within this delay).",
    )
    gate_buffer_dir: Path | None = unset(
        "Directory of the disk buffer for decision events the broker did not "
        "acknowledge (one per gate process). Unset: the first free of "
        "<MONITOR_STATE_DIR>/gate-buffer, gate-buffer-1, ... (gate processes sharing a state "
        "dir each take one)."
    )
    gate_buffer_max_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=1024 * 1024,
        description="Size cap of the gate's disk buffer in bytes (512 MiB); when full the "
        "oldest buffered decision events are dropped (whole segments) and counted.",
    )
    gate_nice: int = Field(
        default=-10,
        ge=-20,
        le=19,
        description="Scheduling priority (nice value) `monitor gate serve` sets for itself at "
        "start, and for its session's autogroup when it leads its own session (as `monitor "
        "up` starts it): below 0 the kernel runs it ahead of the worker, broker and database "
        "when they compete for the same cores (needs CAP_SYS_NICE; refused -> a warning, left "
        "at 0; not a session leader -> a warning: with kernel.sched_autogroup_enabled the "
        "value then weighs only within its session). -10 by default: measured on two cores "
        "at 500 requests/s, the p99 was 5.5-20 ms alone and 0.7-2.7 times that beside a busy "
        "worker at 0, 5.5-7.8 ms and 1.0-1.2 times at -10 (docs/benchmarks.md).",
    )
    gate_spill_after_s: float = positive(
        2.0,
        "A decision event not acknowledged by the broker within this delay (seconds) is "
        "written to the disk buffer (a killed gate process can lose at most this window).",
    )
