"""The event-loop probe: lags recorded with plain values, the window's longest stall, the
/metrics export, and a real loop held by a blocking call."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from monitor.telemetry.loop_lag import LoopLag
from monitor.telemetry.ops_metrics import OpsMetrics


def test_lag_is_how_late_the_wake_up_came_and_never_negative() -> None:
    lag = LoopLag(clock=lambda: 0.0)
    assert lag.record(expected=10.0, woke=10.3) == pytest.approx(0.3)
    assert lag.record(expected=11.0, woke=10.9) == 0.0
    assert lag.longest == pytest.approx(0.3) and lag.samples == 2


def test_recent_max_covers_the_window_only() -> None:
    lag = LoopLag(clock=lambda: 0.0, window_s=60.0)
    lag.record(0.0, 2.0)  # a 2 s stall at t=2
    lag.record(10.0, 10.5)  # 0.5 s at t=10.5
    lag.record(20.0, 20.1)
    assert lag.recent_max(now=30.0) == pytest.approx(2.0)
    assert lag.recent_max(now=62.5) == pytest.approx(0.5)  # the 2 s stall left the window
    assert lag.recent_max(now=80.0) == pytest.approx(0.1)
    assert lag.recent_max(now=200.0) == 0.0
    assert lag.longest == pytest.approx(2.0)  # the all-time longest stays


def test_run_records_each_wake_up_with_an_injected_clock_and_sleep() -> None:
    now = [100.0]
    late = iter([0.0, 0.2, 0.05])
    stopping = asyncio.Event()
    lag = LoopLag(clock=lambda: now[0], interval_s=0.05)

    async def sleep(seconds: float) -> None:
        delay = next(late, None)
        if delay is None:
            stopping.set()
            delay = 0.0
        now[0] += seconds + delay

    asyncio.run(lag.run(stopping, sleep))
    assert lag.samples == 4
    assert lag.longest == pytest.approx(0.2)
    assert lag.recent_max() == pytest.approx(0.2)


def test_metrics_export_the_recent_stall_and_the_histogram() -> None:
    metrics = OpsMetrics()
    now = [1000.0]
    lag = LoopLag(clock=lambda: now[0])
    metrics.watch_loop(lag)
    lag.record(999.0, 999.75)
    lag.record(999.9, 999.91)
    text = metrics.render().decode()
    assert re.search(r"^monitor_event_loop_stall_seconds 0\.75$", text, re.M)
    assert re.search(r"^monitor_event_loop_lag_seconds_count 2\.0$", text, re.M)
    assert re.search(r'^monitor_event_loop_lag_seconds_bucket\{le="0.5"\} 1\.0$', text, re.M)
    now[0] += 120
    text = metrics.render().decode()
    assert re.search(r"^monitor_event_loop_stall_seconds 0\.0$", text, re.M)


async def test_a_blocking_call_on_the_loop_is_measured() -> None:
    stopping = asyncio.Event()
    lag = LoopLag(clock=time.monotonic, interval_s=0.01)
    probe = asyncio.create_task(lag.run(stopping))
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # holds the loop
    await asyncio.sleep(0.05)
    stopping.set()
    await probe
    assert lag.longest >= 0.25
