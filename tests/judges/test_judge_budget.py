"""The per-conversation time budget of the deterministic judges, and where they run (a worker
thread of the judge loop, never the event loop's thread)."""

from __future__ import annotations

import asyncio
import threading

from monitor.judges.base import Conversation, Verdict
from monitor.judges.runner import JudgeRunner
from monitor.judges.worker import JudgeConfig, JudgeLoop
from monitor.sampling.policy import SamplingPolicy
from tests.judges.test_judges_deterministic import Conv


class Slow:
    """A judge that takes ``seconds`` of the injected clock and records where it ran."""

    applies_to = "everything"

    def __init__(self, name: str, clock: list[float], seconds: float) -> None:
        self.name, self.version, self.clock, self.seconds = name, "1", clock, seconds
        self.threads: list[str] = []

    def judge(self, conversation: Conversation) -> list[Verdict]:
        self.threads.append(threading.current_thread().name)
        self.clock[0] += self.seconds
        return [Verdict(self.name, self.version, conversation.conversation_id, None, label=1)]


def _conv() -> Conversation:
    c = Conv()
    c.user("hello")
    c.say("hi")
    return c.conv()


def test_no_judge_starts_after_the_budget_and_each_one_left_says_so() -> None:
    clock = [0.0]
    judges = [Slow("a", clock, 4.0), Slow("b", clock, 7.0), Slow("c", clock, 1.0)]
    runner = JudgeRunner(judges)
    out = runner.deterministic(_conv(), set(), deadline=10.0, now=lambda: clock[0])
    assert [(v.judge, v.status) for v in out] == [("a", "ok"), ("b", "ok"), ("c", "error")]
    assert out[2].error is not None and out[2].error.startswith("time_budget:")
    assert judges[2].threads == []  # never started
    # without a deadline (or within it) every judge runs; judges done are skipped
    clock[0] = 0.0
    out = runner.deterministic(_conv(), {("b", "1")}, deadline=100.0, now=lambda: clock[0])
    assert [(v.judge, v.status) for v in out] == [("a", "ok"), ("c", "ok")]


def test_the_judge_loop_runs_cpu_work_in_its_judge_thread() -> None:
    clock = [0.0]
    judge = Slow("a", clock, 0.0)
    loop = JudgeLoop(
        JudgeConfig("127.0.0.1:1", "postgresql://unused/x"),
        JudgeRunner([judge]),
        SamplingPolicy().always_sample,
    )

    async def main() -> str:
        conv = _conv()
        await loop._off_loop(lambda: loop.runner.deterministic(conv, set()))
        return threading.current_thread().name

    try:
        loop_thread = asyncio.run(main())
    finally:
        asyncio.run(loop.close())
    assert judge.threads and judge.threads[0].startswith("judge")
    assert judge.threads[0] != loop_thread
