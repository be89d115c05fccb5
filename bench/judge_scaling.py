"""How the deterministic judges scale with conversation length: CPU time and peak traced memory
of every deterministic judge (with the airline domain's reference) on one long tool-using
conversation (``tests/judges/long_conversation.py``: an airline-style cancel-and-refund loop
with failures, retries, claims, amounts, dates and ids), per size, as a ratio to the smallest
size measured in the same run (linear code: the ratio follows the size ratio). Then the cap:
the same judges on a conversation of the largest size cut to ``--cap`` events
(``Conversation.capped``, what the worker loads for it). Run from the repository root::

    .venv/bin/python bench/judge_scaling.py                     # 1000 2000 4000 8000 events
    .venv/bin/python bench/judge_scaling.py --sizes 2000 8000 32000 --cap 2000
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

from monitor.judges.airline import domain
from monitor.judges.base import Conversation
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.figures import _terms
from monitor.judges.lexicon import _claims
from tests.judges.long_conversation import long_conversation


def cold() -> None:
    """Empty the judges' memo caches (a new conversation's texts are not in them) and collect."""
    _terms.cache_clear()
    _claims.cache_clear()
    gc.collect()


def cost(conv: Conversation, repeat: int) -> tuple[float, int, int]:
    """(best CPU seconds over ``repeat`` runs, peak traced bytes, verdicts)."""
    judges = deterministic_judges(domain().references)
    best = float("inf")
    for _ in range(repeat):
        cold()
        started = time.process_time()
        verdicts = [v for j in judges for v in j.judge(conv)]
        best = min(best, time.process_time() - started)
    cold()
    tracemalloc.start()
    verdicts = [v for j in judges for v in j.judge(conv)]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak, len(verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    parser.add_argument("--cap", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    base: tuple[float, int] | None = None
    print(
        f"{'events':>8} {'cpu s':>8} {'peak MiB':>9} {'verdicts':>9} {'x size':>7} "
        f"{'x cpu':>7} {'x mem':>7}"
    )
    for n in sizes:
        cpu, peak, verdicts = cost(Conversation.of(long_conversation(n)), args.repeat)
        base = base or (cpu, peak)
        print(
            f"{n:>8} {cpu:>8.3f} {peak / 2**20:>9.2f} {verdicts:>9} {n / sizes[0]:>7.1f} "
            f"{cpu / base[0]:>7.2f} {peak / base[1]:>7.2f}"
        )
    capped = Conversation.capped(long_conversation(sizes[-1]), args.cap)
    cpu, peak, verdicts = cost(capped, args.repeat)
    print(
        f"capped: {sizes[-1]} events cut to {len(capped.events)}: {cpu:.3f} s CPU, "
        f"{peak / 2**20:.2f} MiB peak, {verdicts} verdicts"
    )


if __name__ == "__main__":
    main()
