"""The gate's inline checks give the recorded verdicts on real conversations.

Every assistant message of the committed tau2-bench runs (``tests/data/tau2`` and the retail
runs of ``tests/data/tau2-results``) is asked about as the gate asks (the conversation up to
that message, ``only=`` its event id, every check of the default policy with the domain's
plugins); every judge also runs in full on each conversation. The verdicts, as stored
(``Verdict.to_dict``), are digested per judge and compared with
``tests/data/gate_verdicts.json``, the recorded reference (its commit is in
``tests/data/README.md``): a cheaper check must give the same verdicts, evidence and rationales.
The text primitives the checks share (figures, claims, the lexicons) are digested over every
text too, and over variants of it that their shortcuts must not misread.
Regenerate the file only for an intended change of a verdict:
``python -m tests.gate.test_inline_checks_recorded > tests/data/gate_verdicts.json``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from bench.policy_recall import load
from monitor.contract.events import AgentEvent
from monitor.gate.checks import CheckSet, verdicts_on
from monitor.gate.policy import DEFAULT_POLICY
from monitor.judges.base import Conversation
from monitor.judges.domains import load_domains
from monitor.judges.figures import extract_figures
from monitor.judges.lexicon import (
    acknowledges_problem,
    find_claims,
    is_read_only,
    is_transient,
    speaks_of_success,
)

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests/data/gate_verdicts.json"


def _paths() -> list[Path]:
    results = sorted((ROOT / "tests/data/tau2-results").glob("*retail*.json.gz"))
    return sorted((ROOT / "tests/data/tau2").glob("*.json")) + results


def _conversations() -> Iterator[tuple[str, list[AgentEvent]]]:
    yield from sorted(load(_paths()).items())


def _texts(events: list[AgentEvent]) -> Iterator[str]:
    for e in events:
        if e.message is not None and e.message.content:
            yield e.message.content
        if e.tool_result is not None:
            yield from (t for t in (e.tool_result.content, e.tool_result.error) if t)


def _variants(text: str) -> Iterator[str]:
    """The text, and forms the prefilters must not misread (case, non-ASCII letters that
    match ASCII ones case-insensitively, no digits)."""
    yield text
    yield text.upper()
    yield text.replace("s", "\u017f").replace("k", "\u212a")
    yield "".join(c for c in text if not c.isdigit())


class Digest:
    """Per key: how many items, how many failing, and a SHA-256 of their canonical JSON."""

    def __init__(self) -> None:
        self.counts: dict[str, list[Any]] = {}
        self._hashes: dict[str, Any] = {}

    def add(self, key: str, item: Any, failing: bool = False) -> None:
        h = self._hashes.setdefault(key, hashlib.sha256())
        h.update(json.dumps(item, sort_keys=True, default=str).encode() + b"\n")
        n = self.counts.setdefault(key, [0, 0])
        n[0] += 1
        n[1] += int(failing)

    def result(self) -> dict[str, list[Any]]:
        return {k: [*self.counts[k], self._hashes[k].hexdigest()] for k in sorted(self.counts)}


def _answer(fn: Callable[[str], Any], text: str) -> Any:
    """``fn(text)``, or the name of the exception it raised (an answer to keep as well)."""
    try:
        return fn(text)
    except Exception as exc:
        return f"raised {type(exc).__name__}"


def digest() -> dict[str, list[Any]]:
    """The digest of the inline checks' verdicts and the primitives' answers (module doc)."""
    checks = CheckSet(load_domains(None))
    names = DEFAULT_POLICY.rules[0].checks
    d = Digest()
    for _, events in _conversations():
        conv = Conversation.of(events)
        judges = checks.judges(names, conv.domain())
        for judge in judges:
            for v in judge.judge(conv):
                d.add(f"full {v.judge}", v.to_dict(), v.label == 0)
        for message in conv.assistant_messages():
            upto = Conversation.of([e for e in conv.events if e.ts <= message.ts])
            for judge in judges:
                calls = bool(message.message and message.message.tool_calls)
                for v in verdicts_on(judge, upto, message.event_id, calls):
                    if v.item_id == message.event_id or v.status == "error":
                        d.add(f"gate {v.judge}", v.to_dict(), v.label == 0)
        for text in _texts(events):
            for t in _variants(text):
                d.add("figures", _answer(lambda x: [asdict(f) for f in extract_figures(x)], t))
                d.add("claims", _answer(lambda x: [asdict(c) for c in find_claims(x)], t))
                d.add("lexicon", _answer(lambda x: [acknowledges_problem(x), is_transient(x)], t))
                d.add("success", _answer(speaks_of_success, t))
        for e in events:
            for call in e.message.tool_calls if e.message is not None else ():
                d.add("read_only", [call.name, is_read_only(call.name)])
    return d.result()


@pytest.mark.slow  # replays every recorded conversation (~10 s): make test, not make check
def test_the_inline_checks_give_the_recorded_verdicts() -> None:
    recorded = json.loads(RECORDED.read_text())
    got = digest()
    assert sum(n for key, (n, _, _) in got.items() if key.startswith("gate ")) > 1000
    assert sum(f for key, (_, f, _) in got.items() if key.startswith("gate ")) > 50
    assert {k for k in got if k.startswith("gate policy.retail")}  # the retail plugin ran
    assert got == recorded


if __name__ == "__main__":
    json.dump(digest(), sys.stdout, indent=1)
    sys.stdout.write("\n")
