"""Cost of the contract's storage checks in ``decode_event``, as a ratio to a baseline.

Baseline: the same parse and model validation without the storage rules (``from_json`` +
``AgentEvent.model_validate``, what ``decode_event`` did before the contract checked storage).
Measured: the real ``decode_event`` (plus NUL/surrogate, depth, integer and timestamp checks, and
the future-skew check when given a clock). Both decode the same simulated events in the same
process; CPU time (``time.process_time``), best of ``--repeat``. Run from the repository root::

    .venv/bin/python bench/decode.py                 # 5,000 conversations, 5 repeats
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from pydantic_core import from_json

from monitor.contract.events import AgentEvent, _json_strict_input, decode_event
from monitor.sim.traffic import Simulator


def best_rate(fn: Callable[[bytes], object], raws: list[bytes], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for raw in raws:
            fn(raw)
        best = min(best, time.process_time() - started)
    return len(raws) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sim = Simulator(7, datetime(2025, 1, 1, tzinfo=UTC))
    raws = [e.to_json() for e in sim.events(args.conversations)]
    now, skew = datetime.now(UTC), timedelta(minutes=5)

    def baseline(raw: bytes) -> object:
        return AgentEvent.model_validate(_json_strict_input(from_json(raw)))

    rates = {
        "baseline (parse + model)": best_rate(baseline, raws, args.repeat),
        "decode_event": best_rate(decode_event, raws, args.repeat),
        "decode_event + skew": best_rate(
            lambda r: decode_event(r, now=now, max_future_skew=skew), raws, args.repeat
        ),
    }
    base = rates["baseline (parse + model)"]
    print(f"{len(raws):,} simulated events, CPU time, best of {args.repeat}")
    print("| decoder | events/s | ratio to baseline |\n|---|---|---|")
    for name, rate in rates.items():
        print(f"| {name} | {rate:,.0f} | {rate / base:.2f} |")


if __name__ == "__main__":
    main()
