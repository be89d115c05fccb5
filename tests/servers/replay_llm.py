"""Recorded chat-completions answers replayed by the loopback :class:`ChatServer`, and the
stand-in answerer the suite's recording was made with.

``replaying(recorded)`` is a ``ChatServer`` default that answers each request with the content
recorded under its :func:`bench.llm_judge.request_key` (what ``bench/llm_judge.py --record``
writes), and 404 with the key when the request was never recorded: a prompt that changed.

The committed recording (:data:`RECORDING`) holds no model's answers: no provider is reachable
from the suite. It was made by :func:`standin`, a fixed keyword rule (an assistant message whose
first line says sorry, unable, cannot... is graded wrong), so it tests the benchmark's plumbing
and arithmetic, never a model. Re-record it after a change of the rubric's prompt or rendering::

    .venv/bin/python -m tests.servers.replay_llm
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from bench.llm_judge import request_key
from tests.servers.llm_server import Action, ChatServer, Recorded, Reply, verdicts_json
from tests.servers.scripted import Status

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests/data/llm_judge/standin_answers.json"
STANDIN_MODEL = "standin-keyword-rule"
STANDIN_LIMIT = 8  # conversations per domain in the recording
STANDIN_WORDS = ("sorry", "unable", "cannot", "can't", "not able")
_ITEM = re.compile(r"^\[item ([^\]]+)\] assistant[^:]*: (.*)$", re.MULTILINE)


def standin_wrong(first_line: str) -> bool:
    """The stand-in's whole judgement of one assistant message, from its first line."""
    low = first_line.lower()
    return any(w in low for w in STANDIN_WORDS)


def standin(request: Recorded) -> Action:
    """Grade every ``[item ...]`` of the rubric request: label 0 (partial resolution) when its
    first line has one of :data:`STANDIN_WORDS`, else label 1."""
    text = request.body["messages"][-1]["content"]
    items = []
    for item_id, first in _ITEM.findall(text):
        if standin_wrong(first):
            items.append(
                {
                    "item_id": item_id,
                    "label": 0,
                    "correctness": 0.2,
                    "categories": ["partial_resolution"],
                    "rationale": "says it cannot do what was asked",
                }
            )
        else:
            items.append({"item_id": item_id})
    return Reply(verdicts_json(*items))


def replaying(recorded: Mapping[str, str]) -> Callable[[Recorded], Action]:
    """A ``ChatServer`` default answering from ``recorded`` (key -> message content)."""

    def answer(request: Recorded) -> Action:
        key = request_key(request.body)
        if key not in recorded:
            return Status(404, f"request {key} was not recorded (re-record: {__name__})")
        return Reply(recorded[key])

    return answer


def load_recording(path: Path = RECORDING) -> dict[str, str]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


async def run_bench(
    base_url: str, *args: str, env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    """``bench/llm_judge.py --base-url base_url args...`` in its own process: exit code, stdout,
    stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "bench/llm_judge.py"),
        "--base-url",
        base_url,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else None,
        cwd=ROOT,
    )
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


async def record(path: Path = RECORDING) -> None:
    """Record the stand-in's answers to the benchmark's requests at ``path``."""
    async with ChatServer(default=standin) as server:
        code, _, err = await run_bench(
            server.base_url,
            "--model",
            STANDIN_MODEL,
            "--limit",
            str(STANDIN_LIMIT),
            "--record",
            str(path),
        )
    if code:
        raise SystemExit(f"bench/llm_judge.py failed ({code}): {err}")


if __name__ == "__main__":
    asyncio.run(record())
    print(f"recorded {len(load_recording())} answers in {RECORDING.relative_to(ROOT)}")
