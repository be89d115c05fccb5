"""The batch writer of the ingest path: the events COPYed in, then one idempotent statement.

Contract: ``write(rows, dead)`` either commits every row of the batch (events, roll-ups and
dead letters in ONE transaction) and returns what it inserted, or raises and commits nothing.
Re-writing the same batch is harmless: duplicates on ``event_id`` (kept in ``event_ids``) are
skipped and do not touch the roll-up, dead letters are unique per (source, partition, offset).
An event whose UTC day has no ``events`` partition yet gets one (:mod:`monitor.store.partitions`):
no event is refused for its age. A day the writer has not seen stored yet is created first in a
short transaction of its own, committed before the batch's: a partition created inside the
batch transaction would be invisible to every other write until that transaction commits, so
the other write in flight would queue behind the whole batch (the creation's advisory lock)
instead of running its COPY beside it. The batch transaction still ensures its days (a
retention run may have dropped one since; it also holds them against a drop until the commit).
The caller commits Kafka offsets only after ``write`` returned.

A duplicate ``event_id`` with a different body (a conflicting duplicate) is not stored: the
first body stays, and the later one becomes a dead letter with reason
``conflicting_duplicate`` (its canonical JSON as ``raw``), counted in ``WriteResult.conflicting``.
An outcome or feedback event whose agent is not its conversation's is not stored either: a dead
letter with reason ``agent_mismatch`` (:mod:`monitor.ingest.owner_sql`), counted in
``WriteResult.mismatched``.
Every event is stored with ``kept`` (:func:`monitor.ingest.decisions.kept_conversations`: its
conversation is sampled by rate or an always-sample rule's fact is in the batch; gate events
always): false puts it in its day's unsampled leaf, which retention empties after
``retention_unsampled_hours``. In the same transaction, after the roll-ups,
:data:`monitor.ingest.decision_sql.PROMOTE` moves to the kept leaf every unkept event of a
conversation of the batch whose stored row is kept now, so a promoted conversation is whole.
Dead-letter text (source, reason, field, detail) is made storable first (NUL and lone
surrogates escaped, detail cut to 4000 characters), so writing a dead letter cannot fail on
its content.

Two ways in, same rows stored: a batch whose event ids are all new (the common case) is
COPYed straight into ``events`` (:mod:`monitor.ingest.direct_sql`); any other batch (a replay,
a re-delivery, an id twice in the batch) goes through a staging table and the de-duplicating
insert of :mod:`monitor.ingest.rollup_sql`.

Uses asyncpg directly (not the SQLAlchemy ORM) because the hot path is COPY-bound.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from operator import itemgetter

import asyncpg

from monitor.contract.limits import printable
from monitor.ingest.connections import WARM_TIMEOUT_S, open_pool, warm
from monitor.ingest.dead_letter_sql import (
    INSERT_CONFLICTS,
    INSERT_DEAD_LETTER,
    storable_dead_letter,
)
from monitor.ingest.decision_sql import KEPT_STORED, PROMOTE
from monitor.ingest.decisions import kept_conversations, provisional
from monitor.ingest.direct_sql import (
    CLAIM_COLUMNS,
    CLAIM_TABLE,
    DIRECT_BATCH,
    ROLLUP_COLUMNS,
    ROLLUP_INDEXES,
    ROLLUP_TABLE,
    SYNC_ITEMS_DIRECT,
)
from monitor.ingest.items_sql import LOCK_CONVERSATIONS, SET_DECISIONS, SYNC_ITEMS, UNDECIDED
from monitor.ingest.rollup_sql import STAGING_TABLE, WRITE_BATCH
from monitor.ingest.rows import EVENT_COLUMNS, DeadLetter, EventRow, event_key
from monitor.sampling.policy import SamplingPolicy, hash_unit
from monitor.store.engine import libpq_url
from monitor.store.partitions import ENSURE_DAYS, days_of

_ID = EVENT_COLUMNS.index("event_id")
_CID = EVENT_COLUMNS.index("conversation_id")
_TYPE = EVENT_COLUMNS.index("type")
_TS = EVENT_COLUMNS.index("ts")
_N = len(EVENT_COLUMNS)
_ROLLUP = itemgetter(*ROLLUP_INDEXES)


@dataclass(frozen=True)
class WriteResult:
    """What one committed batch changed."""

    inserted: int  # new rows in events
    duplicates: int  # rows skipped because their event_id was already stored
    conversations: int  # conversation rows inserted or updated
    dead_letters: int  # dead letters offered (already-stored ones are skipped silently)
    decided: int = 0  # conversations that got their sampling decision in this batch
    new_items: int = 0  # new rows in items
    relabelled: int = 0  # items whose label changed
    conflicting: int = 0  # duplicates with a different body, dead-lettered (first one stays)
    staged: int = 0  # 1 when the rows went through the staging table (not the direct path)
    mismatched: int = 0  # outcome/feedback events of another agent's conversation, dead-lettered
    unkept: int = 0  # rows written unkept (outside the sample so far)
    promoted: int = 0  # unkept events moved to the kept leaves (this batch's or earlier ones)


MAX_KNOWN_DAYS = 4096  # days the writer remembers as having a partition (then it forgets all)
_COPY = [*EVENT_COLUMNS, "kept"]


class _Claimed(Exception):
    """An id of a direct write's batch was stored already (its transaction is failed)."""


def _distinct_ids(rows: Sequence[EventRow]) -> bool:
    """Whether no event id appears twice in ``rows`` (else the batch is staged)."""
    return len({r[_ID] for r in rows}) == len(rows)


class EventWriter:
    """Writes batches into Postgres through a small asyncpg pool (created by ``start``).

    ``policy`` decides which conversations are sampled and their weight in the metrics; each
    conversation is decided once, in the batch that first writes it, and the decision is stored
    with the policy's digest (a later policy change applies to new conversations only).

    ``direct=False`` stages every batch (the path replays take; for comparisons and benchmarks).
    ``WriteResult.staged`` says which path a write took.
    """

    def __init__(
        self,
        database_url: str,
        pool_size: int = 2,
        policy: SamplingPolicy | None = None,
        direct: bool = True,
    ) -> None:
        self._dsn = libpq_url(database_url)
        self._pool_size = pool_size
        self._policy = policy if policy is not None else SamplingPolicy()
        self._digest = self._policy.digest()
        rules = self._policy.always_sample
        # PROMOTE's $2-$5: which stored facts keep a conversation's events
        self._rules = (
            rules.confidence_floor,
            rules.escalation,
            rules.failed_tool_call,
            rules.negative_feedback_below is not None,
        )
        self._pool: asyncpg.Pool | None = None
        self._direct = direct
        self._days: set[date] = set()  # days whose partition this writer saw committed

    async def start(self) -> None:
        """Create the pool. Raises OSError / asyncpg errors when the server is unreachable."""
        if self._pool is None:
            self._pool = await open_pool(self._dsn, self._pool_size)

    async def warm(self, timeout_s: float = WARM_TIMEOUT_S) -> str | None:
        """Open the pool's connections and rehearse the direct write's statements on each
        (:mod:`monitor.ingest.connections`: best effort, at most ``timeout_s``); returns None when
        done, else why it stopped."""
        await self.start()
        assert self._pool is not None
        no_rows = (*provisional([], self._policy), self._digest, "")
        statements = [
            (ENSURE_DAYS, ([],)),
            (LOCK_CONVERSATIONS, ([],)),
            (DIRECT_BATCH, no_rows),
            (SYNC_ITEMS_DIRECT, ([], [])),
            (KEPT_STORED, ([], *self._rules)),
            (PROMOTE, ([], *self._rules)),
        ]
        return await warm(self._pool, self._pool_size, statements, timeout_s)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def write(
        self,
        rows: Sequence[EventRow],
        dead: Sequence[DeadLetter] = (),
        source: str = "kafka",
        copied: Callable[[], None] | None = None,
    ) -> WriteResult:
        """Commit ``rows`` and ``dead`` atomically (see the module contract); ``source`` names
        where the rows came from (the topic) in conflicting-duplicate dead letters.

        ``copied`` is called once the rows have been sent to Postgres (the COPYs are done;
        right away when there are no rows): from then on the rest of the write is the server's
        work, so the caller's CPU is free (``bench/write_overlap.py`` starts the next write)."""
        if self._pool is None:
            await self.start()
        assert self._pool is not None
        days = days_of(r[_TS] for r in rows)
        if not self._days.issuperset(days):  # created apart first: see the module contract
            async with self._pool.acquire() as conn:
                await conn.fetchval(ENSURE_DAYS, days)
            if len(self._days) > MAX_KNOWN_DAYS:
                self._days.clear()
            self._days.update(days)
        async with self._pool.acquire() as conn:
            if rows and self._direct and _distinct_ids(rows):
                with contextlib.suppress(_Claimed):  # an id stored already: rolled back
                    async with conn.transaction():
                        return await self._write_in(conn, rows, dead, source, copied, days, True)
            async with conn.transaction():
                return await self._write_in(conn, rows, dead, source, copied, days, False)

    async def _write_in(
        self,
        conn: asyncpg.Connection,
        rows: Sequence[EventRow],
        dead: Sequence[DeadLetter],
        source: str,
        copied: Callable[[], None] | None,
        days: list[date],
        direct: bool,
    ) -> WriteResult:
        """The body of ``write`` in ``conn``'s transaction: the direct path when ``direct``
        (raises ``_Claimed`` when an id was stored already: the caller rolls back and stages),
        else the staging path."""
        inserted = conversations = decided = new_items = relabelled = conflicting = 0
        mismatched = unkept = promoted = 0
        if rows:  # the day partitions of the rows first (created when missing)
            await conn.fetchval(ENSURE_DAYS, days)
            decisions = provisional(rows, self._policy)
            kept = kept_conversations(rows, decisions, self._policy)
            unsampled = [c for c, hit in zip(decisions[0], decisions[6], strict=True) if not hit]
            if maybe := [c for c in unsampled if c not in kept]:  # kept by an earlier batch?
                stored = await conn.fetch(KEPT_STORED, maybe, *self._rules)
                kept.update(str(r[0]) for r in stored)
            # gate events are always kept: the gate's effect reads them over the whole retention
            events = [(*r[:_N], r[_CID] in kept or r[_TYPE] == "gate") for r in rows]
            unkept = sum(not e[_N] for e in events)
            if direct:  # every id is new: claimed, then straight into events
                await self._claim(conn, rows)
                await conn.copy_records_to_table("events", records=events, columns=_COPY)
                await conn.copy_records_to_table(
                    ROLLUP_TABLE, records=map(_ROLLUP, rows), columns=list(ROLLUP_COLUMNS)
                )
            else:
                await conn.copy_records_to_table(STAGING_TABLE, records=events, columns=_COPY)
            if copied is not None:
                copied()
            # locked before the batch statement: its before images of the conversation
            # rows (escalation_bins) must be the rows its upsert changes
            cids = sorted({str(r[_CID]) for r in rows})
            await conn.execute(LOCK_CONVERSATIONS, cids)
            # new conversation rows are decided in the statement (monitor.ingest.decisions)
            record = await conn.fetchrow(
                DIRECT_BATCH if direct else WRITE_BATCH,
                *decisions,
                self._digest,
                printable(source),
            )
            assert record is not None
            inserted, conversations = int(record["inserted"]), int(record["conversations"])
            mismatched = int(record["mismatched"])
            decided = int(record["decided"])
            # rows of this batch left undecided (a guess that missed, a row stored before
            # decisions existed): decided from the stored row; none in the common case
            if record["undecided"]:
                decided += await self._decide(conn, cids)
            # earlier unkept events of a conversation kept now, and this batch's of one whose
            # stored row was kept already (by a rule, or a decision made under another policy)
            if unsampled:
                promoted = int(await conn.fetchval(PROMOTE, unsampled, *self._rules))
            relabel = sorted({str(r[_CID]) for r in rows if r[_TYPE] == "outcome"})
            synced = await conn.fetchrow(SYNC_ITEMS_DIRECT if direct else SYNC_ITEMS, cids, relabel)
            assert synced is not None
            new_items, relabelled = int(synced["new_items"]), int(synced["relabelled"])
            if len(rows) > inserted + mismatched:  # ids stored already: same body?
                conflicting = len(await conn.fetch(INSERT_CONFLICTS, printable(source)))
        elif copied is not None:
            copied()
        if dead:
            await conn.executemany(INSERT_DEAD_LETTER, [storable_dead_letter(d) for d in dead])
        return WriteResult(
            inserted,
            len(rows) - inserted - conflicting - mismatched,
            conversations,
            len(dead),
            decided,
            new_items,
            relabelled,
            conflicting,
            int(bool(rows) and not direct),
            mismatched,
            unkept,
            promoted,
        )

    @staticmethod
    async def _claim(conn: asyncpg.Connection, rows: Sequence[EventRow]) -> None:
        """Claim every event id of ``rows`` (distinct) in ``event_ids``, in key order (see
        :mod:`monitor.ingest.direct_sql`), or raise ``_Claimed`` when one is stored already:
        the COPY has failed the transaction then, which the caller rolls back whole."""
        claims = sorted((event_key(r[_ID]), r[_TS], r[_CID]) for r in rows)
        try:
            await conn.copy_records_to_table(CLAIM_TABLE, records=claims, columns=CLAIM_COLUMNS)
        except asyncpg.UniqueViolationError as exc:
            raise _Claimed from exc

    async def _decide(self, conn: asyncpg.Connection, cids: list[str]) -> int:
        """Store the sampling decision of every conversation of ``cids`` not decided yet (the
        batch statement decides the new rows whose segment the writer guessed right; this
        decides the rest: rows that existed undecided, or whose events disagreed).

        Only the probability-sample part of the decision is stored (stratum, rate, by_rate,
        weight): it depends on the conversation id and its segment alone, so it is final when
        the conversation is first written. The always-sample rules are evaluated where the
        conversation is judged (they depend on events that may come later).
        """
        undecided = await conn.fetch(UNDECIDED, cids)
        if not undecided:
            return 0
        ids, strata, rates, by_rate, weights = [], [], [], [], []
        for r in undecided:
            stratum = self._policy.stratum_for(r["agent_id"], r["domain"], r["tier"])
            hit = hash_unit(r["conversation_id"], self._policy.salt) < stratum.rate
            ids.append(r["conversation_id"])
            strata.append(stratum.name)
            rates.append(stratum.rate)
            by_rate.append(hit)
            weights.append(1.0 / stratum.rate if hit else 0.0)
        await conn.execute(SET_DECISIONS, ids, strata, rates, by_rate, weights, self._digest)
        return len(ids)
