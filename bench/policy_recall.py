"""Precision and recall of the judges against tau2-bench rewards, and what the policy rules cost.

Reads tau2-bench results files (``tests/data/tau2/*.json`` and the trimmed
``tests/data/tau2-results/*.json.gz``; sources and licences in
``tests/data/tau2-results/SOURCE.md``), turns them into agent-event/v1 conversations
(:mod:`monitor.replay.tau2`, one per simulation id, duplicates dropped), runs the deterministic
judges and the shipped domains' policy rules (:mod:`monitor.judges.airline`,
:mod:`monitor.judges.retail`) on each, and prints, per domain, the quality report of ``monitor
judges`` (:func:`monitor.judges.quality.judge_quality`: per
judge, precision and recall of "flagged" against "failed" = reward < 1, 95 % Wilson intervals,
and the "any judge (labelling)" row). Then the cost: the policy rules' wall time per
conversation as a ratio to the four deterministic judges on the same conversations (both
measured in this run), and the p99 of one gate-style evaluation (the rules on the last
assistant message that calls a tool, ``only=`` that message). Run from the repository root::

    .venv/bin/python bench/policy_recall.py
    .venv/bin/python bench/policy_recall.py --json
    .venv/bin/python bench/policy_recall.py other/results/*.json   # any tau2 results files
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from monitor.contract.events import AgentEvent
from monitor.judges import airline, retail
from monitor.judges.base import Conversation
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.offline import by_conversation, offline_judgements
from monitor.judges.quality import JudgeQuality, Proportion, judge_quality
from monitor.judges.runner import JudgeRunner
from monitor.replay.tau2 import tau2_events

ROOT = Path(__file__).resolve().parent.parent


def load(paths: Iterable[Path]) -> dict[str, list[AgentEvent]]:
    """Conversations of every results file (``.json`` or ``.json.gz``), first copy wins."""
    out: dict[str, list[AgentEvent]] = {}
    for path in paths:
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
        for cid, events in by_conversation(tau2_events(data)).items():
            out.setdefault(cid, events)
    return out


def _p(p: Proportion) -> str:
    if p.value is None:
        return f"-  ({p.k}/{p.n})"
    return f"{p.value:.2f} [{p.low:.2f}, {p.high:.2f}] ({p.k}/{p.n})"


def report(rows: list[JudgeQuality]) -> list[str]:
    lines = []
    for r in rows:
        if r.category is None:
            name = f"{r.judge} {r.judge_version}".strip()
            lines.append(
                f"  {name:44} pairs {r.pairs:4}  precision {_p(r.precision):26} "
                f"recall {_p(r.recall)}"
            )
    return lines


def timing(convs: list[Conversation], runner: JudgeRunner) -> dict[str, float]:
    """Median-of-3 wall time of the deterministic judges and of the policy rules over
    ``convs``, and the p99 of a gate-style (``only=``) policy evaluation."""
    det = deterministic_judges()

    def run(judges: Any, conv: Conversation) -> None:
        for j in judges:
            j.judge(conv)

    def timed(pick: Any) -> float:
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            for conv in convs:
                run(pick(conv), conv)
            runs.append(time.perf_counter() - t0)
        return statistics.median(runs)

    fresh = [Conversation.of(list(c.events)) for c in convs]  # no evaluation memo reused
    t_det = timed(lambda c: det)
    t_pol = timed(lambda c: [j for j in runner.judges_for(c) if j.name.startswith("policy.")])
    gate = []
    for conv in fresh:
        calls = [e for e in conv.assistant_messages() if e.message and e.message.tool_calls]
        if not calls:
            continue
        judges = [j for j in runner.judges_for(conv) if j.name.startswith("policy.")]
        t0 = time.perf_counter()
        for j in judges:
            j.judge(conv, only=calls[-1].event_id)  # type: ignore[call-arg]
        gate.append((time.perf_counter() - t0) * 1000)
    gate.sort()
    return {
        "deterministic_s": t_det,
        "policy_s": t_pol,
        "policy_to_deterministic": t_pol / t_det if t_det else float("nan"),
        "gate_p99_ms": gate[int(0.99 * (len(gate) - 1))] if gate else float("nan"),
        "gate_max_ms": gate[-1] if gate else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "files",
        nargs="*",
        type=Path,
        help="tau2 results files (.json or .json.gz); default: the committed ones",
    )
    args = ap.parse_args()
    files = list(args.files) or sorted((ROOT / "tests/data/tau2").glob("*.json"))
    if not args.files:
        files += sorted((ROOT / "tests/data/tau2-results").glob("*.json.gz"))
    convs = load(files)
    domains = {"airline": airline.domain(), "retail": retail.domain()}
    runner = JudgeRunner(deterministic_judges(), domains=domains)
    out: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {platform.python_version()}",
        "files": len(files),
        "domains": {},
    }
    lines = [f"{out['date']}  {out['machine']}  {len(files)} files, {len(convs)} conversations"]
    for name in domains:
        mine = [e for e in convs.values() if e[0].context and e[0].context.domain == name]
        rows = judge_quality(offline_judgements(mine, runner.judges_for))
        failed = sum(1 for e in mine if any(x.outcome and not x.outcome.success for x in e))
        out["domains"][name] = {"conversations": len(mine), "failed": failed, "quality": rows}
        lines.append(f"{name}: {len(mine)} conversations, {failed} failed (reward < 1)")
        lines += report(rows)
    conversations = [Conversation.of(e) for e in convs.values()]
    t = timing(conversations, runner)
    out["timing"] = t
    lines.append(
        f"cost: policy rules {t['policy_s'] * 1000:.0f} ms vs deterministic judges "
        f"{t['deterministic_s'] * 1000:.0f} ms over {len(conversations)} conversations "
        f"(ratio {t['policy_to_deterministic']:.2f}); gate-style evaluation p99 "
        f"{t['gate_p99_ms']:.2f} ms, max {t['gate_max_ms']:.2f} ms"
    )
    if args.json:
        print(json.dumps(out, default=lambda o: o.__dict__, indent=1))
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
