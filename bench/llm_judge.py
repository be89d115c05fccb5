"""The rubric LLM judge measured on the tau2 runs in tests/data, against their rewards.

Runs :class:`monitor.judges.llm.LLMJudge` (the rubric of :mod:`monitor.judges.rubric`) over any
OpenAI-compatible chat-completions endpoint on the tau2-bench airline and retail runs of
``tests/data`` (``tau2/``, ``tau2-results/``, ``tau2-heldapart/``; sources in their SOURCE.md),
and prints per domain and over both:

- the LLM judge as a detector of failed runs (reward < 1), per conversation as ``monitor
  judges`` measures it (:func:`monitor.judges.quality.judge_quality`): precision and recall with
  95 % Wilson intervals, Cohen's kappa against the outcome, and whether it would label items
  under the precision floor (the lower end of its precision's interval against 0.7);
- its verdict errors by code (an error is no opinion: the conversation is left out);
- its agreement with the deterministic judges and the domain policy rules: Cohen's kappa
  (:mod:`monitor.judges.agreement`) of "the LLM flagged the conversation" against "that judge
  flagged it", over the conversations both gave a verdict on, and the same against "any of
  them flagged it".

``--limit N`` judges the first N conversations of each domain in the order of the SHA-256 of
their ids (a fixed sample, the same on every run). ``--record FILE`` writes every answer the
endpoint gave, keyed by :func:`request_key`, as the JSON object a replaying server reads (the
suite replays one: tests/servers/replay_llm.py). Nothing is written to a database.

    .venv/bin/python bench/llm_judge.py --base-url https://api.openai.com/v1 --model gpt-4.1 \\
        --api-key-env OPENAI_API_KEY --limit 50
    .venv/bin/python bench/llm_judge.py --base-url http://localhost:11434/v1 --model qwen2.5:7b
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.policy_recall import default_files, load
from monitor.analytics.calibration import Proportion
from monitor.contract.events import AgentEvent
from monitor.judges import airline, retail
from monitor.judges.agreement import agreement
from monitor.judges.base import Conversation, Verdict
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.llm import LLMJudge, LLMJudgeConfig
from monitor.judges.offline import offline_judgements
from monitor.judges.quality import (
    DEFAULT_PRECISION_FLOOR,
    ConversationJudgement,
    JudgeQuality,
    judge_quality,
    labels,
)
from monitor.judges.runner import JudgeRunner

DOMAINS = ("airline", "retail")
ANY_OTHER = "any deterministic judge or rule"


def request_key(body: Mapping[str, Any]) -> str:
    """The key of a chat-completions request: the SHA-256 of its model and messages as
    canonical JSON (sorted keys, no spaces), so the same prompt to the same model is the same
    key whatever else the request sets."""
    canonical = json.dumps(
        {"model": body.get("model"), "messages": body.get("messages")},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class RecordingTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends as usual and keeps the message content of every 2xx
    chat-completions answer under its request's :func:`request_key` (``recorded``)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.recorded: dict[str, str] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = await response.aread()
        if 200 <= response.status_code < 300:
            try:
                content = json.loads(body)["choices"][0]["message"]["content"]
                key = request_key(json.loads(request.content))
            except (ValueError, KeyError, IndexError, TypeError):
                pass
            else:
                if isinstance(content, str):
                    self.recorded[key] = content
        return httpx.Response(
            response.status_code, headers=response.headers, content=body, request=request
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Given:
    """A judge that hands back verdicts already given (the LLM's), for
    :func:`monitor.judges.offline.offline_judgements`."""

    name: str
    version: str
    verdicts: Mapping[str, list[Verdict]]
    applies_to: str = "the conversations it judged"

    def judge(self, conversation: Conversation) -> list[Verdict]:
        return self.verdicts.get(conversation.conversation_id, [])


def sample(convs: Iterable[list[AgentEvent]], limit: int | None) -> list[list[AgentEvent]]:
    """The conversations in the order of the SHA-256 of their ids, the first ``limit``."""
    ordered = sorted(convs, key=lambda e: hashlib.sha256(e[0].conversation_id.encode()).digest())
    return ordered if limit is None else ordered[:limit]


async def judge_all(
    conversations: Sequence[Conversation],
    config: LLMJudgeConfig,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[str, dict[str, list[Verdict]]]:
    """The LLM judge's version and its verdicts per conversation id."""
    async with LLMJudge(config, transport=transport) as judge:
        results = await asyncio.gather(*(judge.judge(c) for c in conversations))
        return judge.version, {
            c.conversation_id: vs for c, vs in zip(conversations, results, strict=True)
        }


def agreements(js: Sequence[ConversationJudgement], llm: str) -> dict[str, dict[str, Any]]:
    """Per other judge (and :data:`ANY_OTHER`): Cohen's kappa of the LLM's flags against its
    flags over the conversations both judged."""
    mine = {j.conversation_id: j.flagged for j in js if j.judge == llm}
    other: dict[str, dict[str, bool]] = {}
    for j in js:
        if j.judge != llm and j.conversation_id in mine:
            other.setdefault(j.judge, {})[j.conversation_id] = j.flagged
            anyone = other.setdefault(ANY_OTHER, {})
            anyone[j.conversation_id] = anyone.get(j.conversation_id, False) or j.flagged
    out = {}
    for name, flags in sorted(other.items(), key=lambda kv: (kv[0] == ANY_OTHER, kv[0])):
        cids = sorted(flags)
        a = agreement([int(mine[c]) for c in cids], [int(flags[c]) for c in cids])
        out[name] = {
            "n": a.n,
            "kappa": a.kappa,
            "accuracy": a.accuracy,
            "both_flagged": a.true_pos,
            "llm_only": a.false_pos,  # agreement's "judge 1, truth 0": the LLM's flag alone
            "other_only": a.false_neg,
            "note": a.reason,
        }
    return out


def measure(
    convs: Sequence[list[AgentEvent]],
    name: str,
    version: str,
    verdicts: Mapping[str, list[Verdict]],
    runner: JudgeRunner,
    floor: float = DEFAULT_PRECISION_FLOOR,
) -> dict[str, Any]:
    """The LLM judge's quality row, errors, floor decision and agreements on ``convs``."""
    llm = Given(name, version, verdicts)
    js = offline_judgements(convs, lambda c: [*runner.judges_for(c), llm])
    row: JudgeQuality | None = next(
        (r for r in judge_quality(js) if r.judge == name and r.category is None), None
    )
    errors = Counter(
        v.error or "?"
        for c in convs
        for v in verdicts.get(c[0].conversation_id, [])
        if v.status == "error"
    )
    failed = sum(1 for e in convs if any(x.outcome and not x.outcome.success for x in e))
    return {
        "conversations": len(convs),
        "failed": failed,
        "quality": row,
        "labels_at_floor": row is not None and labels(row.precision, floor),
        "errors": dict(errors),
        "agreement": agreements(js, name),
    }


def _p(p: Proportion | None) -> str:
    if p is None or p.value is None:
        return "-" if p is None else f"- (0/{p.n})"
    return f"{p.value:.2f} [{p.low:.2f}, {p.high:.2f}] ({p.k}/{p.n})"


def report(label: str, got: Mapping[str, Any], floor: float) -> list[str]:
    """The text lines of one domain (or of both)."""
    q: JudgeQuality | None = got["quality"]
    errors = ", ".join(f"{k} {n}" for k, n in sorted(got["errors"].items())) or "none"
    lines = [
        f"{label}: {got['conversations']} conversations, {got['failed']} failed (reward < 1); "
        f"LLM verdict errors: {errors}"
    ]
    if q is None:
        lines.append("  the LLM judge gave no verdict with a label")
        return lines
    kappa = "-" if q.kappa is None else f"{q.kappa:.2f}"
    lines.append(
        f"  flagged vs failed: pairs {q.pairs}  precision {_p(q.precision)}  recall "
        f"{_p(q.recall)}  kappa {kappa}  tp/fp/fn/tn {q.true_pos}/{q.false_pos}/{q.false_neg}/"
        f"{q.true_neg}"
    )
    low = "-" if q.precision.low is None else f"{q.precision.low:.2f}"
    lines.append(
        f"  labels items at the floor {floor:g}: "
        f"{'yes' if got['labels_at_floor'] else 'no'} (lower end {low})"
    )
    lines.append(
        "  agreement with the deterministic judges and the rules that flagged (Cohen's kappa of "
        "the flags, on the conversations both judged; --json: every rule):"
    )
    for other, a in got["agreement"].items():
        if other.startswith("policy.") and not a["both_flagged"] + a["other_only"]:
            continue
        k = "-" if a["kappa"] is None else f"{a['kappa']:.2f}"
        lines.append(
            f"    {other:44} n {a['n']:4}  kappa {k:>5}  both {a['both_flagged']:3}  "
            f"LLM only {a['llm_only']:3}  other only {a['other_only']:3}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True, help="the API root, e.g. http://host:8000/v1")
    ap.add_argument("--model", required=True, help="model name sent in every request")
    ap.add_argument("--api-key-env", help="environment variable holding the API key")
    ap.add_argument("--limit", type=int, help="conversations per domain (a fixed sample)")
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight at most")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per HTTP attempt")
    ap.add_argument("--no-json-mode", action="store_true", help="no response_format")
    ap.add_argument("--floor", type=float, default=DEFAULT_PRECISION_FLOOR)
    ap.add_argument("--record", type=Path, help="write the answers, keyed by request, here")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("files", nargs="*", type=Path, help="tau2 results files (default: tests/data)")
    args = ap.parse_args(argv)
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            print(f"error: {args.api_key_env} is not set (--api-key-env)", file=sys.stderr)
            return 2
    files = list(args.files) or [f for part in default_files().values() for f in part]
    loaded = load(files)
    by_domain = {
        d: sample(
            [e for e in loaded.values() if e[0].context and e[0].context.domain == d], args.limit
        )
        for d in DOMAINS
    }
    chosen = [Conversation.of(e) for convs in by_domain.values() for e in convs]
    config = LLMJudgeConfig(
        base_url=args.base_url,
        model=args.model,
        api_key=key,
        timeout=args.timeout,
        max_concurrency=args.concurrency,
        json_mode=not args.no_json_mode,
    )
    recorder = RecordingTransport() if args.record else None
    version, verdicts = asyncio.run(judge_all(chosen, config, recorder))
    if recorder is not None:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(recorder.recorded, indent=1, sort_keys=True) + "\n")
    runner = JudgeRunner(
        deterministic_judges(), domains={"airline": airline.domain(), "retail": retail.domain()}
    )
    out: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {platform.python_version()}",
        "model": args.model,
        "judge_version": version,
        "floor": args.floor,
        "domains": {},
    }
    lines = [f"{out['date']}  {out['machine']}  judge llm {version} at {args.base_url}"]
    every: list[list[AgentEvent]] = []
    for d, convs in by_domain.items():
        if convs:
            got = measure(convs, "llm", version, verdicts, runner, args.floor)
            out["domains"][d] = got
            lines += report(d, got, args.floor)
            every += convs
    if len(out["domains"]) > 1:
        out["all"] = measure(every, "llm", version, verdicts, runner, args.floor)
        lines += report("both domains", out["all"], args.floor)
    if args.json:
        print(json.dumps(out, default=lambda o: o.__dict__, indent=1))
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
