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
assistant message that calls a tool, ``only=`` that message).

Also per domain: the opt-in rules (``Rule.default`` false, e.g. ``monitor.judges.retail.opt_in``),
measured the same way but left out of "any judge"; and the "any judge" and "any policy rule"
rows on two halves split by task id (even: the tuning half, odd: the check half; a task id that
is not a number goes by its CRC-32), so a rule tuned on one half is seen on the other; and
the default rules as the gate sees a call (before it runs) against the tool's own refusals
(:func:`refusals`).
Run from the repository root::

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
import zlib
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from monitor.analytics.calibration import Proportion
from monitor.contract.events import AgentEvent
from monitor.judges import airline, retail
from monitor.judges.base import Conversation
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.offline import by_conversation, offline_judgements
from monitor.judges.policy.evaluate import RuleJudge, evaluate
from monitor.judges.policy.facts import rejected
from monitor.judges.quality import (
    ANY_JUDGE,
    ConversationJudgement,
    JudgeQuality,
    judge_quality,
)
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


def half(events: list[AgentEvent]) -> str:
    """``tuning`` (even task id) or ``check`` (odd); a non-numeric id goes by its CRC-32."""
    task = (events[0].context.task_id if events[0].context else None) or ""
    n = int(task) if task.isdigit() else zlib.crc32(task.encode())
    return "tuning" if n % 2 == 0 else "check"


def any_rows(
    js: list[ConversationJudgement], muted: frozenset[str] = frozenset()
) -> dict[str, JudgeQuality]:
    """The "any judge" row of ``js`` and the same row over the policy rules alone; with
    ``muted`` (the judges that do not label on all conversations), those judges count as not
    flagging and no other is muted (a half is too small to measure the floor on)."""
    out = {}
    js = [j for j in js if j.judge not in muted]
    for label, pick in (("any judge", js), ("any policy rule", [j for j in js if _rule(j)])):
        rows = judge_quality(pick, floor=0.0) if muted else judge_quality(pick)
        row = next((r for r in rows if r.judge == ANY_JUDGE), None)
        if row is not None:
            out[label] = row
    return out


def refusals(mine: list[list[AgentEvent]], judges: Any) -> dict[str, Proportion]:
    """The default rules as the gate sees a call (before it runs, refused or not) against the
    tool's own answer: over the calls a rule checked that got a result, precision = refused
    among flagged, recall = flagged among refused."""
    rules = [j.rule for j in judges if isinstance(j, RuleJudge)]
    tp = fp = fn = 0
    for events in mine:
        results = {e.tool_result.call_id: e for e in events if e.tool_result is not None}
        checked: dict[str, bool] = {}
        for f in evaluate(rules, Conversation.of(events)):
            checked[f.call.id] = checked.get(f.call.id, False) or not f.check.ok
        for call_id, flagged in checked.items():
            if call_id in results:
                refused = rejected(results[call_id])
                tp += flagged and refused
                fp += flagged and not refused
                fn += refused and not flagged
    return {"precision": Proportion.of(tp, tp + fp), "recall": Proportion.of(tp, tp + fn)}


def _rule(j: ConversationJudgement) -> bool:
    return j.judge.startswith("policy.")


def report(rows: list[JudgeQuality], suffix: str = "") -> list[str]:
    lines = []
    for r in rows:
        if r.category is None:
            name = f"{r.judge} {r.judge_version}{suffix}".strip()
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
    opt_in = {"retail": retail.opt_in().judges}
    out: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {platform.python_version()}",
        "files": len(files),
        "domains": {},
    }
    lines = [f"{out['date']}  {out['machine']}  {len(files)} files, {len(convs)} conversations"]
    for name in domains:
        mine = [e for e in convs.values() if e[0].context and e[0].context.domain == name]
        if not mine:
            continue
        js = offline_judgements(mine, runner.judges_for)
        rows = judge_quality(js)
        extra = opt_in.get(name, ())
        opt_rows = [
            r
            for r in judge_quality(offline_judgements(mine, lambda c, x=extra: x))  # type: ignore[misc]
            if not r.judge.startswith("any ")
        ]
        failed = sum(1 for e in mine if any(x.outcome and not x.outcome.success for x in e))
        gate = refusals(mine, domains[name].judges)
        halves: dict[str, dict[str, JudgeQuality]] = {}
        muted = frozenset(r.judge for r in rows if r.category is None and not r.labels)
        for h in ("tuning", "check"):
            ids = {e[0].conversation_id for e in mine if half(e) == h}
            halves[h] = any_rows([j for j in js if j.conversation_id in ids], muted)
        out["domains"][name] = {
            "conversations": len(mine),
            "failed": failed,
            "quality": rows,
            "opt_in": opt_rows,
            "halves": halves,
            "gate_vs_tool_refusals": gate,
        }
        lines.append(f"{name}: {len(mine)} conversations, {failed} failed (reward < 1)")
        lines += report(rows)
        lines += report(opt_rows, " (opt-in)")
        if (pol := any_rows(js).get("any policy rule")) is not None:
            lines.append(
                f"  {'any policy rule (default rules)':44} pairs {pol.pairs:4}  precision "
                f"{_p(pol.precision):26} recall {_p(pol.recall)}"
            )
        lines.append(
            f"  gate-style flags vs the tool's refusals: precision {_p(gate['precision']):26} "
            f"recall {_p(gate['recall'])}"
        )
        for h, by in halves.items():
            for label, r in by.items():
                lines.append(
                    f"  {h} half, {label:16} precision {_p(r.precision):26} recall {_p(r.recall)}"
                )
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
