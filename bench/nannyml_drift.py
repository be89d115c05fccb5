"""NannyML 0.13 beside the monitor's drift checks, on the real-answer agents of
``bench/alert_quality.py`` (a bench-only extra: NannyML is not a dependency).

    python -m venv .venv-nannyml && .venv-nannyml/bin/pip install "nannyml>=0.13,<0.14" \\
        statsmodels "pydantic>=2,<3"
    PYTHONPATH=. .venv-nannyml/bin/python bench/nannyml_drift.py [--seeds 1-3]

Per agent and seed: the same answers (150 an hour, 48 h, :mod:`monitor.sim.answers`), NannyML's
univariate drift calculator on ``confidence`` and ``correct`` with a pinned reference (hours
0-24) and hourly chunks (its default methods and alert thresholds); an hour is flagged when any
column alerts. Prints, to set beside ``bench/alert_quality.py --real-only``: alerted hours per
stationary agent-day (hours 24-48 of the stationary agents), and for each agent that changes at
hour 24 the minutes from the change to the end of its first flagged chunk (a chunk is judged
when it is complete) and the share of its post-change chunks (hours 24-48) flagged.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from pathlib import Path

os.environ.setdefault("NML_DISABLE_USAGE_LOGGING", "1")  # no telemetry upload

import nannyml as nml
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.real_agents import ANSWERS, PER_HOUR, REAL_HOURS, T0, real_agents
from monitor.sim.answers import answer_items, parse_pools


def flagged_hours(items: list[tuple]) -> list[bool]:
    df = pd.DataFrame(items, columns=["ts", "confidence", "correct"])
    df["ts"] = pd.to_datetime(df["ts"]).dt.tz_localize(None)
    df["correct"] = df["correct"].astype("category")
    cut = (T0 + timedelta(hours=24)).replace(tzinfo=None)
    ref, ana = df[df.ts < cut], df[df.ts >= cut]
    calc = nml.UnivariateDriftCalculator(
        column_names=["confidence", "correct"], timestamp_column_name="ts", chunk_period="h"
    )
    calc.fit(ref)
    res = calc.calculate(ana).filter(period="analysis").to_df()
    alerts = [c for c in res.columns if c[-1] == "alert"]
    return [bool(x) for x in res[alerts].any(axis=1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-3")
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    pools = parse_pools(ANSWERS.read_text())
    agents, _ = real_agents()
    false = hours = 0
    flagged: list[str] = []
    delays: list[str] = []
    for seed in range(int(lo), int(hi or lo) + 1):
        for name, agent in agents.items():
            items = answer_items(agent, pools, T0, T0 + timedelta(hours=REAL_HOURS), PER_HOUR, seed)
            marks = flagged_hours(items)
            if name.startswith("changed"):
                first = next((i for i, m in enumerate(marks) if m), None)
                delays.append(
                    f"{name} seed {seed}: " + ("never" if first is None else f"{(first + 1) * 60}")
                )
                flagged.append(f"{name} seed {seed}: {sum(marks) / len(marks):.0%}")
            elif name != "recovers":
                false += sum(marks)
                hours += len(marks)
    print(f"NannyML {nml.__version__} univariate drift, pinned reference hours 0-24, hourly")
    print(f"stationary agents: {false} alerted hours in {hours} = {false / hours * 24:.2f} / day")
    print("minutes from the change to the end of the first flagged chunk: " + "; ".join(delays))
    print("post-change chunks flagged: " + "; ".join(flagged))


if __name__ == "__main__":
    main()
