"""Poison-pill isolation for the ingest loop: bisect a batch the store rejects.

``write_isolating`` first writes the whole batch. When that fails with an error that is not
transient (:mod:`monitor.store.store_errors`; transient ones are retried inside ``write`` and
never reach here), it writes the batch's dead letters alone (their text is made storable, so
that write cannot fail on content), then bisects the events: every half the store takes is
written, a half it refuses is split again, and an event refused on its own becomes a dead letter
with reason ``store_rejected`` whose detail is the database's message (SQLSTATE + text). The
result sums every partial write. For a batch of n events with k poison events, this costs
O(k log n) extra writes; a batch without poison costs one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from aiokafka import ConsumerRecord

from monitor.ingest.rows import BODY, OFFSET, PARTITION, DeadLetter, EventRow
from monitor.ingest.writer import WriteResult
from monitor.store.store_errors import describe

log = logging.getLogger("monitor.ingest")

Write = Callable[[list[EventRow], Sequence[DeadLetter]], Awaitable[WriteResult]]


def add(a: WriteResult, b: WriteResult) -> WriteResult:
    """Field-wise sum of two write results."""
    return WriteResult(*(x + y for x, y in zip(vars(a).values(), vars(b).values(), strict=True)))


def rejected_letter(
    row: EventRow,
    records: dict[tuple[int, int], ConsumerRecord[bytes, bytes]],
    topic: str,
    exc: BaseException,
) -> DeadLetter:
    """The ``store_rejected`` dead letter of ``row`` (the original Kafka bytes when known)."""
    partition, offset = row[PARTITION], row[OFFSET]
    rec = records.get((partition, offset))
    raw = rec.value if rec is not None and rec.value is not None else str(row[BODY]).encode()
    key = rec.key if rec is not None else None
    return DeadLetter(topic, partition, offset, "store_rejected", None, describe(exc), raw, key)


async def write_isolating(
    rows: list[EventRow],
    dead: list[DeadLetter],
    records: Sequence[ConsumerRecord[bytes, bytes]],
    topic: str,
    write: Write,
    publish: Callable[[DeadLetter], Awaitable[None]],
    passthrough: type[BaseException],
) -> WriteResult:
    """Write ``rows`` and ``dead``, isolating poison events (module docstring).

    ``write`` retries transient errors itself; ``publish`` sends a new dead letter to the DLQ
    topic; ``passthrough`` (the loop's stop signal) is re-raised untouched.
    """
    try:
        return await write(rows, dead)
    except passthrough:
        raise
    except Exception as exc:
        log.warning(
            "the store rejected a batch of %d events (%s); isolating the poison",
            len(rows),
            describe(exc),
        )
    total = WriteResult(0, 0, 0, 0)
    if dead:
        total = add(total, await write([], dead))
    by_offset = {(r.partition, r.offset): r for r in records}
    chunks = [rows] if rows else []
    while chunks:
        chunk = chunks.pop()
        try:
            total = add(total, await write(chunk, []))
            continue
        except passthrough:
            raise
        except Exception as exc:
            if len(chunk) > 1:
                half = len(chunk) // 2
                chunks.extend([chunk[half:], chunk[:half]])
                continue
            letter = rejected_letter(chunk[0], by_offset, topic, exc)
        log.error(
            "event at %s[%s]@%s rejected by the store: %s",
            letter.source,
            letter.partition,
            letter.offset,
            letter.detail,
        )
        await publish(letter)
        total = add(total, await write([], [letter]))
    return total
