"""Precision and recall of the judges against tau2-bench rewards, on the runs they were
developed on and on runs held apart from their development, and what the policy rules cost.

Reads tau2-bench results files, turns them into agent-event/v1 conversations
(:mod:`monitor.replay.tau2`, one per simulation id, duplicates dropped), runs the deterministic
judges and the shipped domains' policy rules (:mod:`monitor.judges.airline`,
:mod:`monitor.judges.retail`) on each, and measures them per domain on two parts:

- **development**: ``tests/data/tau2/*.json`` and ``tests/data/tau2-results/*.json.gz``, the
  runs the rules and judges were developed and tuned on (sources in
  ``tests/data/tau2-results/SOURCE.md``);
- **held apart**: ``tests/data/tau2-heldapart/*.json.gz``, other agents' and models' runs
  nobody tuned on (``tests/data/tau2-heldapart/SOURCE.md``).

Per part, the quality report of ``monitor judges`` (:func:`monitor.judges.quality.judge_quality`:
per judge, precision and recall of "flagged" against "failed" = reward < 1, 95 % Wilson
intervals), the default and opt-in rules side by side, and three "any judge" rows: **every
default judge** (each flag counts), **labelling as the monitor would** on that part's own
outcomes (the floor on the lower end of the interval, per agent x domain, else pooled:
:func:`monitor.judges.quality.labelling`) and, on the held-apart part, **labelling decided on
the development runs** (what was known before: the development part's decisions, pooled for
the agents it never saw), **labelling on both parts** (a monitor that watched every agent
of both parts and has all their outcomes) and a what-if the monitor does not do: **the
development decisions with a domain's default policy rules pooled as one judge** (every rule
labels when the lower end of the interval of "any policy rule" on the development runs clears
the floor; it measures what partial pooling of rules would give, docs/benchmarks.md says why
the monitor does not). A default rule whose held-apart precision is below
the floor is marked for opt-in. Then the default rules as the gate sees a call against the
tool's own refusals (:func:`refusals`) and the cost: the policy rules' wall time per
conversation as a ratio to the four deterministic judges, and the p99 of one gate-style
evaluation (the rules on the last assistant message that calls a tool, ``only=`` that
message).

Run from the repository root::

    .venv/bin/python bench/policy_recall.py
    .venv/bin/python bench/policy_recall.py --json
    .venv/bin/python bench/policy_recall.py --development a.json --held-apart b.json.gz
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
    DEFAULT_PRECISION_FLOOR,
    any_judge,
    judge_quality,
    labelling,
    labels,
    labels_in,
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


PARTS = ("development", "held apart")


def default_files() -> dict[str, list[Path]]:
    return {
        "development": sorted((ROOT / "tests/data/tau2").glob("*.json"))
        + sorted((ROOT / "tests/data/tau2-results").glob("*.json.gz")),
        "held apart": sorted((ROOT / "tests/data/tau2-heldapart").glob("*.json.gz")),
    }


def measure_part(
    mine: list[list[AgentEvent]], runner: JudgeRunner, extra: tuple[Any, ...]
) -> dict[str, Any]:
    """One part of one domain: its judgements, the quality rows (default judges), the opt-in
    rules' rows and the "any" rows (module docstring)."""
    js = offline_judgements(mine, runner.judges_for)
    rows = judge_quality(js)
    opt_rows = [
        r
        for r in judge_quality(offline_judgements(mine, lambda c: extra))
        if not r.judge.startswith("any ")
    ]
    rules = [j for j in js if j.judge.startswith("policy.")]
    anys = {
        "every default judge": any_judge(js, lambda *_: True),
        "any judge, labelling on this part": next(r for r in rows if r.judge == ANY_JUDGE),
        "any policy rule": any_judge(rules, lambda *_: True),
    }
    return {
        "conversations": len(mine),
        "failed": sum(1 for e in mine if any(x.outcome and not x.outcome.success for x in e)),
        "judgements": js,
        "quality": rows,
        "opt_in": opt_rows,
        "any": anys,
        "labelling": labelling(js),
    }


def rules_pooled(dev: dict[str, Any]) -> Any:
    """The development part's labelling decisions, and every default policy rule labelling when
    the lower end of "any policy rule" on the development part clears the floor (the what-if
    row of the module docstring; the monitor does not pool rules)."""
    decided = labels_in(dev["labelling"])
    pooled = labels(dev["any"]["any policy rule"].precision)

    def decide(judge: str, version: str, agent_id: str, domain: str) -> bool:
        return decided(judge, version, agent_id, domain) or (pooled and judge.startswith("policy."))

    return decide


def compare(
    parts: dict[str, dict[str, Any]], floor: float = DEFAULT_PRECISION_FLOOR
) -> list[dict[str, Any]]:
    """Per judge (default and opt-in), its precision and recall on each part, and whether a
    default rule falls below ``floor`` on the held-apart part (then it should be opt-in)."""
    by: dict[str, dict[str, Any]] = {}
    for part, got in parts.items():
        for opt, rows in ((False, got["quality"]), (True, got["opt_in"])):
            for r in rows:
                if r.category is not None or r.judge.startswith("any "):
                    continue
                row = by.setdefault(r.judge, {"judge": r.judge, "opt_in": opt})
                row[part] = {"precision": r.precision, "recall": r.recall}
    for row in by.values():
        held = row.get("held apart", {}).get("precision")
        row["below_floor_held_apart"] = (
            held is not None and held.value is not None and held.value < floor
        )
    return sorted(by.values(), key=lambda r: (r["opt_in"], r["judge"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--development", nargs="*", type=Path, help="development runs (default: the committed)"
    )
    ap.add_argument(
        "--held-apart", nargs="*", type=Path, help="held-apart runs (default: the committed)"
    )
    args = ap.parse_args()
    files = default_files()
    if args.development is not None:
        files["development"] = list(args.development)
    if args.held_apart is not None:
        files["held apart"] = list(args.held_apart)
    loaded = {part: load(files[part]) for part in PARTS}
    seen = set(loaded["development"])
    loaded["held apart"] = {k: v for k, v in loaded["held apart"].items() if k not in seen}
    domains = {"airline": airline.domain(), "retail": retail.domain()}
    runner = JudgeRunner(deterministic_judges(), domains=domains)
    opt_in = {"airline": airline.opt_in().judges, "retail": retail.opt_in().judges}
    out: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {platform.python_version()}",
        "files": {part: [f.name for f in files[part]] for part in PARTS},
        "domains": {},
    }
    lines = [
        f"{out['date']}  {out['machine']}  "
        + ", ".join(f"{p}: {len(files[p])} files, {len(loaded[p])} conversations" for p in PARTS)
    ]
    for name in domains:
        parts: dict[str, dict[str, Any]] = {}
        for part in PARTS:
            mine = [
                e for e in loaded[part].values() if e[0].context and e[0].context.domain == name
            ]
            if mine:
                parts[part] = measure_part(mine, runner, tuple(opt_in.get(name, ())))
                parts[part]["gate_vs_tool_refusals"] = refusals(mine, domains[name].judges)
        if not parts:
            continue
        if "development" in parts and "held apart" in parts:
            dev, held = parts["development"], parts["held apart"]
            held["any"]["any judge, labelling decided on development"] = any_judge(
                held["judgements"], labels_in(dev["labelling"])
            )
            held["any"]["what-if: development, policy rules pooled"] = any_judge(
                held["judgements"], rules_pooled(dev)
            )
            every = labelling(dev["judgements"] + held["judgements"])
            held["any"]["any judge, labelling on both parts"] = any_judge(
                held["judgements"], labels_in(every)
            )
        rows = compare(parts)
        out["domains"][name] = {
            "parts": {
                p: {k: v for k, v in got.items() if k not in ("judgements", "labelling")}
                for p, got in parts.items()
            },
            "judges": rows,
        }
        lines += report_domain(name, parts, rows)
    conversations = [Conversation.of(e) for part in PARTS for e in loaded[part].values()]
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


def report_domain(
    name: str, parts: dict[str, dict[str, Any]], rows: list[dict[str, Any]]
) -> list[str]:
    """The text report of one domain: per judge both parts side by side, then the "any" rows
    and the gate-style comparison per part."""
    lines = [
        f"{name}: "
        + "; ".join(
            f"{p} {got['conversations']} conversations, {got['failed']} failed"
            for p, got in parts.items()
        )
    ]
    lines.append(f"  {'judge':44} " + "".join(f"{p + ' precision / recall':62}" for p in parts))
    for r in rows:
        label = r["judge"] + (" (opt-in)" if r["opt_in"] else "")
        cells = []
        for p in parts:
            got = r.get(p)
            cells.append(
                f"{_p(got['precision']):28} {_p(got['recall']):33}" if got else f"{'-':62}"
            )
        mark = "  << below the floor held apart" if r["below_floor_held_apart"] else ""
        lines.append(f"  {label:44} " + "".join(cells) + mark)
    for p, got in parts.items():
        for label, q in got["any"].items():
            lines.append(f"  {p}, {label:44} precision {_p(q.precision):28} recall {_p(q.recall)}")
        gate = got["gate_vs_tool_refusals"]
        lines.append(
            f"  {p}, gate-style flags vs the tool's refusals: precision "
            f"{_p(gate['precision'])}, recall {_p(gate['recall'])}"
        )
    return lines


if __name__ == "__main__":
    main()
