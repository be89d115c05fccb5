"""CLI start-up: `monitor --help` and `monitor calibration --json` on an empty store.

Each command runs ``--repeat`` times as a fresh ``python -m monitor.cli`` process; the figure is
the median wall time and the median CPU time (user + sys of the child, which a loaded machine
inflates far less than wall time). The baseline, measured in the same run and the same way, is
the floor every CLI pays: an interpreter that imports typer and rich and prints a help text
(``python -c "import typer, rich.table"``). Ratios are command / baseline.

The database is ``MONITOR_DATABASE_URL`` (or ``DATABASE_URL``): an empty, migrated store.
Run from the repository root::

    MONITOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/empty \\
        .venv/bin/python bench/cli_startup.py --repeat 7
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall s, child CPU s) of one run of ``argv`` (which must exit 0)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not (os.environ.get("MONITOR_DATABASE_URL") or os.environ.get("DATABASE_URL")):
        sys.exit("set MONITOR_DATABASE_URL to an empty, migrated database")
    py = sys.executable
    cases = {
        "baseline (import typer, rich)": [py, "-c", "import typer, rich.table; print('help')"],
        "monitor --help": [py, "-m", "monitor.cli", "--help"],
        "monitor calibration --json": [py, "-m", "monitor.cli", "calibration", "--json"],
    }
    results: dict[str, tuple[float, float]] = {}
    for name, argv in cases.items():
        timed(argv)  # warm the file cache
        runs = [timed(argv) for _ in range(args.repeat)]
        results[name] = (
            statistics.median(w for w, _ in runs),
            statistics.median(c for _, c in runs),
        )
    base_wall, base_cpu = results["baseline (import typer, rich)"]
    print(f"{'case':<32} {'wall s':>7} {'cpu s':>7} {'wall/base':>9} {'cpu/base':>8}")
    for name, (wall, cpu) in results.items():
        print(f"{name:<32} {wall:7.2f} {cpu:7.2f} {wall / base_wall:9.2f} {cpu / base_cpu:8.2f}")
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
