"""Publishing dead letters to the DLQ topic, one record at a time.

- A record whose value is above :data:`DLQ_MAX_VALUE_BYTES` (well under the producer's
  ``max_request_size``, 1 MiB) is published as its first :data:`DLQ_HEAD_BYTES` bytes with the
  headers ``truncated=true``, ``original_bytes`` and ``sha256`` (of the whole value); the
  original stays in the source topic, named by the ``source``/``source_partition``/
  ``source_offset`` headers, and whole in the ``dead_letters`` table.
- :class:`DlqBatch` remembers which records the broker acknowledged: a retry re-sends only the
  ones not acknowledged yet, so a record that keeps failing never duplicates the others. A
  record refused with a non-retriable error (``MessageSizeTooLargeError``...) is given up on
  the topic (it is still in the table) and logged.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

from monitor.ingest.rows import DeadLetter

log = logging.getLogger("monitor.ingest")

DLQ_MAX_VALUE_BYTES = 512 * 1024
DLQ_HEAD_BYTES = 4096


def dlq_record(d: DeadLetter) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The value and headers of ``d``'s DLQ record (truncated when oversize)."""
    headers = d.headers()
    if len(d.raw) <= DLQ_MAX_VALUE_BYTES:
        return d.raw, headers
    extra = [
        ("truncated", b"true"),
        ("original_bytes", str(len(d.raw)).encode()),
        ("sha256", hashlib.sha256(d.raw).hexdigest().encode()),
    ]
    return d.raw[:DLQ_HEAD_BYTES], headers + extra


def retriable(exc: BaseException) -> bool:
    """Worth publishing again: a timeout or a Kafka error the client marks retriable."""
    transient = (asyncio.TimeoutError, TimeoutError, KafkaTimeoutError, KafkaConnectionError)
    return isinstance(exc, transient) or bool(getattr(exc, "retriable", False))


class DlqBatch:
    """The dead letters of one batch still to be acknowledged by the broker."""

    def __init__(self, dead: Sequence[DeadLetter], topic: str) -> None:
        self.pending = list(dead)
        self.topic = topic
        self.given_up: list[DeadLetter] = []

    async def publish(self, producer: AIOKafkaProducer) -> None:
        """Send every pending record; raise the first retriable error after all were tried."""
        sent: list[tuple[DeadLetter, asyncio.Future[object] | BaseException]] = []
        for d in self.pending:
            value, headers = dlq_record(d)
            try:
                fut = await producer.send(self.topic, value=value, key=d.key, headers=headers)
                sent.append((d, fut))
            except Exception as exc:
                sent.append((d, exc))
        results = await asyncio.gather(
            *(f for _, f in sent if isinstance(f, asyncio.Future)), return_exceptions=True
        )
        it = iter(results)
        still: list[DeadLetter] = []
        first: BaseException | None = None
        for d, f in sent:
            outcome = next(it) if isinstance(f, asyncio.Future) else f
            if not isinstance(outcome, BaseException):
                continue
            if not retriable(outcome):
                log.error(
                    "DLQ record for %s[%s]@%s refused by the broker (%s); kept in the "
                    "dead_letters table only",
                    d.source,
                    d.partition,
                    d.offset,
                    type(outcome).__name__,
                )
                self.given_up.append(d)
                continue
            still.append(d)
            first = first or outcome
        self.pending = still
        if first is not None:
            raise first
