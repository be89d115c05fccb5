"""``bench/llm_judge.py`` in its own process against a loopback chat-completions server that
replays recorded answers (tests/servers/replay_llm.py): the table it prints is the arithmetic of
those answers against the runs' rewards, every request is one the recording holds (a changed
prompt fails here, with the command that re-records), and a missing answer or key is a clear
error, not a crash."""

from __future__ import annotations

import json
from pathlib import Path

from bench.llm_judge import DOMAINS, sample
from bench.policy_recall import default_files, load
from monitor.judges.rubric import MAX_CONTENT_CHARS
from tests.servers.llm_server import ChatServer
from tests.servers.replay_llm import (
    STANDIN_LIMIT,
    STANDIN_MODEL,
    load_recording,
    record,
    replaying,
    run_bench,
    standin,
    standin_wrong,
)

ARGS = ("--model", STANDIN_MODEL, "--limit", str(STANDIN_LIMIT))


def expected() -> dict[str, tuple[int, int, int, int]]:
    """Per domain, (tp, fp, fn, tn) of the stand-in's rule applied to the sampled runs' events
    directly (no prompt, no HTTP): flagged = one assistant message's first line says it
    cannot; failed = reward < 1."""
    loaded = load([f for part in default_files().values() for f in part])
    out = {}
    for d in DOMAINS:
        convs = sample(
            [e for e in loaded.values() if e[0].context and e[0].context.domain == d],
            STANDIN_LIMIT,
        )
        counts = [0, 0, 0, 0]
        for events in convs:
            flagged = any(
                standin_wrong((e.message.content or "")[:MAX_CONTENT_CHARS].split("\n")[0])
                for e in events
                if e.message is not None and e.message.role == "assistant"
            )
            failed = any(e.outcome is not None and not e.outcome.success for e in events)
            counts[(0 if failed else 1) if flagged else (2 if failed else 3)] += 1
        out[d] = (counts[0], counts[1], counts[2], counts[3])
    return out


async def test_the_bench_prints_precision_recall_and_agreement_of_replayed_answers() -> None:
    async with ChatServer(default=replaying(load_recording())) as server:
        code, out, err = await run_bench(server.base_url, *ARGS, "--json")
        assert code == 0, err
        statuses = len(server.requests)
        code, text, err = await run_bench(server.base_url, *ARGS)
        assert code == 0, err
    got = json.loads(out)
    assert statuses == sum(d["conversations"] for d in got["domains"].values()) == 16
    want = expected()
    assert sum(tp + fn for tp, _, fn, _ in want.values()) > 0  # failed runs in the sample
    assert sum(tp for tp, *_ in want.values()) > 0  # and the rule catches some: not vacuous
    for d, (tp, fp, fn, tn) in want.items():
        row = got["domains"][d]
        assert row["errors"] == {}, row["errors"]  # every request was in the recording
        q = row["quality"]
        assert (q["true_pos"], q["false_pos"], q["false_neg"], q["true_neg"]) == (tp, fp, fn, tn)
        if tp + fp:
            assert q["precision"]["value"] == tp / (tp + fp)
            assert q["precision"]["low"] <= q["precision"]["value"] <= q["precision"]["high"]
        assert row["labels_at_floor"] is False  # a handful of flags never earns labels
        anyone = row["agreement"]["any deterministic judge or rule"]
        assert anyone["n"] == 8 and "det.unsupported_figure" in row["agreement"]
        assert anyone["both_flagged"] + anyone["llm_only"] == tp + fp
    both = got["all"]["quality"]
    assert both["pairs"] == 16 and both["true_pos"] == sum(w[0] for w in want.values())
    assert got["judge_version"] == f"{STANDIN_MODEL}/rubric-v1"
    for line in ("airline: 8 conversations", "retail: 8 conversations", "both domains:"):
        assert line in text
    assert "flagged vs failed: pairs 8  precision" in text
    assert "labels items at the floor 0.7: no" in text
    assert "any deterministic judge or rule" in text


async def test_the_recording_is_what_the_current_prompts_ask(tmp_path: Path) -> None:
    """Recording again with the stand-in gives the committed file: the prompts the bench sends
    today are the ones recorded (else: ``python -m tests.servers.replay_llm``)."""
    fresh = tmp_path / "answers.json"
    await record(fresh)
    assert json.loads(fresh.read_text()) == load_recording()


async def test_a_missing_answer_and_a_missing_key_are_clear_errors() -> None:
    async with ChatServer(default=replaying({})) as server:
        code, out, err = await run_bench(server.base_url, *ARGS, "--json")
        assert code == 0, err
        got = json.loads(out)
        for d in DOMAINS:
            assert got["domains"][d]["errors"] == {"http_404": 8}
            assert got["domains"][d]["quality"] is None
        code, _, err = await run_bench(
            server.base_url, *ARGS, "--api-key-env", "NO_SUCH_KEY_VAR", env={"PATH": ""}
        )
        assert code == 2 and "NO_SUCH_KEY_VAR is not set" in err
    one = ("--model", STANDIN_MODEL, "--limit", "1", "--api-key-env", "JUDGE_KEY")
    async with ChatServer(default=standin) as server:
        code, _, err = await run_bench(
            server.base_url, *one, env={"JUDGE_KEY": "sk-bench-0123456789"}
        )
        assert code == 0, err
        assert {r.headers.get("Authorization") for r in server.requests} == {
            "Bearer sk-bench-0123456789"
        }
