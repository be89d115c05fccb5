"""Judge workers: schedule sampled conversations for judging, judge them, store the verdicts.

Two tasks, both framework-free (``app.py`` runs them inside the worker):

- the **scheduler** (:meth:`JudgeLoop.schedule_forever`) every ``schedule_interval_s`` claims
  conversations idle (no event timestamped in the last ``idle_s`` and none arrived in the last
  ``arrival_idle_s``: :mod:`.rejudge`) that are in the sample (rate or always-sample rule) and
  not yet requested, and judged conversations that stored more events since their verdicts,
  idle again (at most ``rejudge_most`` times each, ``rejudge_gap_s`` apart), and publishes one
  request per conversation to the ``judge-requests`` topic (key = conversation id), recording
  it in ``judge_requests`` in the same transaction;
- the **consumer** (:meth:`JudgeLoop.consume_forever`, its own consumer group) reads requests in
  batches, judges up to ``concurrency`` conversations at once, writes the verdicts of all the
  batch's conversations (and the relabelled items) in one transaction, and commits the batch's
  offsets only after it. One transaction per conversation cost Postgres more than the judging:
  a planned relabel statement (~1.2 ms), a lock statement and a commit each.

Guarantees: ingestion never waits for a judge (separate topic and consumer group); a judge
that fails yields ``status='error'`` verdicts (the judges never raise); a request delivered
twice, or re-delivered after a crash, runs only the judges that have no verdict on the
conversation yet, and verdicts are unique per (item, judge, version): nothing is judged twice
on the same events. A conversation that stored events since its verdicts is judged afresh by
every judge and its verdicts are replaced (:func:`~.rejudge.replaces`), in the transaction
that relabels its items. A store outage is retried with backoff; the batch stays uncommitted
meanwhile.

Bounded work per conversation: at most ``max_events`` events of a conversation are loaded and
judged (the first and last ones; the rest is summarised by Postgres, :mod:`.truncation`), and
the CPU-bound work (parsing the stored events, the deterministic judges, serialising the
verdicts) runs in ``threads`` worker threads, never on the event loop that serves HTTP,
ingest and the gate; no judge starts after the conversation's ``time_budget_s``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from monitor.consume.guarded_fetch import GuardedFetch, ends
from monitor.core.clock import Clock, SystemClock
from monitor.judges import repo as judge_repo
from monitor.judges.base import Conversation, Verdict
from monitor.judges.quality_repo import FloorChange, refresh_judge_quality
from monitor.judges.rejudge import JudgeTiming, replaces, watch
from monitor.judges.runner import JudgeRunner as JudgeRunner
from monitor.judges.runner import mark_truncated
from monitor.judges.truncation import DEFAULT_MAX_EVENTS
from monitor.sampling.rules import AlwaysSampleRules
from monitor.store.engine import CUSTOM_PLANS, libpq_url
from monitor.telemetry.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.judging")
T = TypeVar("T")

STORE_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncio.TimeoutError)


@dataclass(frozen=True)
class _Judged:
    """One conversation judged, its verdicts not stored yet."""

    conversation_id: str
    agent_id: str
    verdicts: list[Verdict]
    started: float  # clock.monotonic() when its judging started (the latency metric)
    judgement: judge_repo.Judgement | None = None  # what it covered (None: nothing stored)


@dataclass(frozen=True)
class JudgeConfig:
    bootstrap: str
    database_url: str
    topic: str = "judge-requests"
    group_id: str = "monitor-judges"
    idle_s: float = 30.0  # by event time (the scheduler's clock)
    arrival_idle_s: float = 30.0  # by arrival (the store's clock)
    rejudge_most: int = 5  # judged again at most this many times when it grew
    rejudge_gap_s: float = 60.0  # and not sooner than this after its last judgement
    schedule_interval_s: float = 5.0
    schedule_batch: int = 200
    concurrency: int = 8
    idempotent_producer: bool = True
    retry_max_s: float = 10.0
    precision_floor: float = 0.7
    floor_min_pairs: int = 30
    quality_interval_s: float = 300.0
    max_events: int = DEFAULT_MAX_EVENTS  # events judged per conversation (the cap)
    time_budget_s: float = 30.0  # per conversation: no judge starts after it
    threads: int = 1  # worker threads of the CPU-bound judging (parse, judges, serialise)
    resend_after_s: float = 3600.0  # a request without verdicts this long after it was sent
    resend_most: int = 2  # is published again at most this many times

    @property
    def timing(self) -> JudgeTiming:
        """When conversations are judged and judged again (:mod:`monitor.judges.rejudge`)."""
        return JudgeTiming(self.idle_s, self.arrival_idle_s, self.rejudge_most, self.rejudge_gap_s)


class JudgeLoop:
    """The scheduler and the consumer of the judging pipeline (see the module docstring)."""

    def __init__(
        self,
        config: JudgeConfig,
        runner: JudgeRunner,
        rules: AlwaysSampleRules,
        metrics: OpsMetrics | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.runner = runner
        self.rules = rules
        self.metrics = metrics or OpsMetrics()
        self.clock = clock or SystemClock()
        self._stopping = asyncio.Event()
        self._sem = asyncio.Semaphore(config.concurrency)
        self._pool: asyncpg.Pool | None = None
        self._producer: AIOKafkaProducer | None = None
        self._tool_agents: dict[str, tuple[bool, float]] = {}  # agent -> (uses tools, when)
        self._executor = ThreadPoolExecutor(config.threads, thread_name_prefix="judge")
        # stored verdicts are handed to this sink (e.g. the OTLP evaluations export), in the
        # background: it must not raise and never delays judging
        self.verdict_sink: Callable[[list[Verdict]], Awaitable[object]] | None = None
        self._sinking: set[asyncio.Future[object]] = set()

    async def start(self) -> None:
        cfg = self.config
        self._pool = await asyncpg.create_pool(  # see store.engine.CUSTOM_PLANS
            libpq_url(cfg.database_url),
            min_size=0,
            max_size=cfg.concurrency + 1,
            server_settings=CUSTOM_PLANS,
        )
        self._producer = AIOKafkaProducer(
            bootstrap_servers=cfg.bootstrap, acks="all", enable_idempotence=cfg.idempotent_producer
        )
        await self._producer.start()

    async def stop(self) -> None:
        """Ask both tasks to finish (a batch being judged stays uncommitted)."""
        self._stopping.set()

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.runner.llm is not None:
            await self.runner.llm.aclose()
        if self._producer is not None:
            await self._producer.stop()
        if self._pool is not None:
            await self._pool.close()

    # -- scheduler ------------------------------------------------------------------------
    async def schedule_once(self) -> int:
        """Claim and publish one round of judge requests (conversations never judged, then
        conversations judged that grew since: :func:`~monitor.judges.repo.claim_rejudges`),
        and publish again the requests lost since (:func:`~monitor.judges.repo.resend_lost`);
        returns how many were sent."""
        assert self._pool is not None and self._producer is not None
        producer, topic = self._producer, self.config.topic

        async def publish(requests: list[judge_repo.JudgeRequest]) -> None:
            sent = [
                await producer.send(topic, r.to_json(), key=r.conversation_id.encode())
                for r in requests
            ]
            await asyncio.gather(*sent)

        cfg, now = self.config, self.clock.now()
        done = await judge_repo.claim_candidates(
            self._pool, self.rules, now, cfg.timing, cfg.schedule_batch, publish
        )
        self.metrics.judge_requests.inc(len(done))
        again = await judge_repo.claim_rejudges(
            self._pool, now, cfg.timing, max(cfg.schedule_batch - len(done), 0), publish
        )
        self.metrics.judge_requests.inc(len(again))
        self.metrics.judge_rejudges.inc(len(again))
        resent = await judge_repo.resend_lost(
            self._pool,
            now,
            _seconds(cfg.resend_after_s),
            cfg.resend_most,
            cfg.schedule_batch,
            publish,
        )
        if resent:
            log.warning(
                "%d judge requests had no verdicts %.0f s after they were sent: sent again",
                len(resent),
                cfg.resend_after_s,
            )
            self.metrics.judge_requests_resent.inc(len(resent))
        return len(done) + len(again) + len(resent)

    async def refresh_quality(self) -> list[FloorChange]:
        """Measure the judges against outcomes and apply the precision floor
        (:func:`monitor.judges.quality_repo.refresh_judge_quality`)."""
        assert self._pool is not None
        _, changes = await refresh_judge_quality(
            self._pool, self.config.precision_floor, self.config.floor_min_pairs
        )
        for c in changes:
            log.warning(
                "judge %s %s %s (precision floor %.2f); %d items relabelled",
                c.judge,
                c.judge_version,
                "muted" if c.muted else "unmuted",
                self.config.precision_floor,
                c.relabelled,
            )
        return changes

    async def schedule_forever(self) -> None:
        last_quality: float | None = None
        while not self._stopping.is_set():
            try:
                sent = await self.schedule_once()
                while sent >= self.config.schedule_batch:  # a backlog: until a round is short
                    sent = await self.schedule_once()
                now = self.clock.monotonic()
                if last_quality is None or now - last_quality >= self.config.quality_interval_s:
                    last_quality = now
                    await self.refresh_quality()
            except Exception as exc:  # the scheduler must outlive any failure
                log.warning("judge scheduling failed (%s); retrying", exc)
            await self._sleep(self.config.schedule_interval_s)

    # -- consumer -------------------------------------------------------------------------
    async def consume_forever(self, ready: asyncio.Event | None = None) -> None:
        cfg = self.config
        consumer = AIOKafkaConsumer(
            cfg.topic,
            bootstrap_servers=cfg.bootstrap,
            group_id=cfg.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=cfg.concurrency * 4,
        )
        await consumer.start()
        try:
            if ready is not None:
                ready.set()
            fetcher = GuardedFetch()  # the consumer fetches with aiokafka's default sizes
            while not self._stopping.is_set():
                fetched = await fetcher.fetch(consumer, 500, cfg.concurrency * 4)
                batch, bad = fetched
                if not batch and not bad:
                    continue
                for b in bad:  # their requests are sent again by the scheduler (resend_lost)
                    log.error("skipping a judge request batch it cannot decode: %s", b.describe())
                    self.metrics.judge_requests_skipped.labels("undecodable_batch").inc()
                requests = []
                for records in batch.values():
                    for rec in records:
                        try:
                            requests.append(judge_repo.JudgeRequest.from_json(rec.value or b""))
                        except (ValueError, KeyError, TypeError) as exc:
                            log.error(
                                "skipping a malformed judge request at %s: %s", rec.offset, exc
                            )
                            self.metrics.judge_requests_skipped.labels("malformed").inc()
                unique = {r.conversation_id: r for r in requests}
                results = await asyncio.gather(*(self._judge(r) for r in unique.values()))
                if not all(r is not None for r in results) or not await self._write(results):
                    return  # stopping: leave the batch uncommitted
                await consumer.commit(ends(fetched))
        finally:
            await consumer.stop()

    async def _write(self, judged: Sequence[_Judged | None]) -> bool:
        """Store the verdicts of a batch's conversations in one transaction (one lock
        statement, one relabel, one commit for all of them: per conversation they cost more
        than judging, docs/benchmarks.md); False only when stopping."""
        assert self._pool is not None
        pool, done = self._pool, [j for j in judged if j is not None]
        agents = {j.conversation_id: j.agent_id for j in done}
        verdicts = [v for j in done for v in j.verdicts]
        judgements = [j.judgement for j in done if j.judgement is not None]
        cols = await self._off_loop(lambda: judge_repo.verdict_columns(agents, verdicts))
        write = judge_repo.write_verdict_columns
        if await self._store(lambda: write(pool, list(agents), cols, judgements)) is None:
            return False
        now = self.clock.monotonic()
        if self.verdict_sink is not None and verdicts:
            task = asyncio.ensure_future(self.verdict_sink(verdicts))
            self._sinking.add(task)
            task.add_done_callback(self._sinking.discard)
        for v in verdicts:
            self.metrics.verdicts.labels(v.judge, v.status).inc()
        for j in done:
            self.metrics.judged.inc()
            self.metrics.judge_latency.observe(now - j.started)
        return True

    async def _judge(self, request: judge_repo.JudgeRequest) -> _Judged | None:
        """Judge one conversation (its verdicts are stored by :meth:`_write`); None only when
        stopping."""
        assert self._pool is not None
        pool, cid, cap = self._pool, request.conversation_id, self.config.max_events
        async with self._sem:
            started = self.clock.monotonic()
            stored = await self._store(lambda: judge_repo.load_for_judging(pool, cid, cap))
            if stored is None:
                return None
            afresh = replaces(stored.events, stored.judged_events)
            done = set() if afresh else await self._store(lambda: judge_repo.judged_by(pool, cid))
            tools = await self._uses_tools(request.agent_id)
            if done is None or tools is None:
                return None
            covered = judge_repo.Judgement(
                cid,
                stored.events,
                afresh,
                watch(stored.events, stored.rejudges, self.config.timing),
            )
            if not stored.bodies:
                return _Judged(cid, request.agent_id, [], started, covered)
            budget, runner, now = self.config.time_budget_s, self.runner, self.clock.monotonic

            def judge() -> tuple[Conversation, list[Verdict]]:  # in the judge thread
                deadline = now() + budget
                events = judge_repo.parse_bodies(stored.bodies)
                conv = Conversation.of(events, tools, stored.omitted)
                return conv, runner.deterministic(conv, done, deadline, now)

            conv, verdicts = await self._off_loop(judge)
            verdicts += await runner.llm_verdicts(conv, done)
            return _Judged(cid, request.agent_id, mark_truncated(conv, verdicts), started, covered)

    async def _off_loop(self, work: Callable[[], T]) -> T:
        """``work()`` in the judge thread(s): CPU-bound work never holds the event loop that
        serves HTTP, ingest and the gate."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    async def _uses_tools(self, agent_id: str) -> bool | None:
        """Whether ``agent_id`` is a tool-using agent (True is remembered for good, False for
        a minute); None when stopping."""
        now = self.clock.monotonic()
        known = self._tool_agents.get(agent_id)
        if known is not None and (known[0] or now - known[1] < 60.0):
            return known[0]
        pool = self._pool
        assert pool is not None
        found = await self._store(lambda: judge_repo.agent_uses_tools(pool, agent_id))
        if found is not None:
            self._tool_agents[agent_id] = (found, now)
        return found

    async def _store(self, op: Callable[[], Awaitable[T]]) -> T | None:
        """Run a store operation until it succeeds (backoff); None when stopping."""
        delay = 0.5
        while True:
            try:
                return await op()
            except STORE_ERRORS as exc:
                log.warning("judge store operation failed (%s); retrying in %.1fs", exc, delay)
                if await self._sleep(delay):
                    return None
                delay = min(delay * 2, self.config.retry_max_s)

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; True when stopping was requested."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
            return True
        except TimeoutError:
            return False


def _seconds(s: float) -> timedelta:
    return timedelta(seconds=s)
