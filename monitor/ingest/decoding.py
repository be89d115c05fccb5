"""Kafka records -> ``events`` rows and dead letters: the CPU part of a batch (pure, no I/O).

A record is anything with the attributes of an aiokafka ``ConsumerRecord`` that this needs
(``topic``, ``partition``, ``offset``, ``key``, ``value``), so this module imports no Kafka
client. The ingest loop decodes a batch in chunks (:func:`chunks`) so that the write of the
previous batch, which runs meanwhile, is not held up for a whole batch's decode.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from monitor.contract.events import decode_event
from monitor.contract.origin import check_origin
from monitor.core.errors import InvalidEvent
from monitor.ingest.rows import DeadLetter, EventRow, event_row

T = TypeVar("T")


class Record(Protocol):
    """The fields of a Kafka record that decoding reads."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


def decode_records(
    records: Iterable[Record],
    now: datetime | None = None,
    max_future_skew: timedelta | None = None,
    origin_key: bytes | None = None,
) -> tuple[list[EventRow], list[DeadLetter]]:
    """Split Kafka records into ``events`` rows and dead letters (pure, never raises).

    With ``now`` and ``max_future_skew``, events too far in the future are dead letters too.
    An event with a gate decision id is a dead letter (``reserved_id``) unless its headers
    carry its origin tag under ``origin_key`` (:mod:`monitor.contract.origin`)."""
    rows: list[EventRow] = []
    dead: list[DeadLetter] = []
    for rec in records:
        raw = rec.value if rec.value is not None else b""
        try:
            event = decode_event(raw, now=now, max_future_skew=max_future_skew)
            check_origin(event.event_id, raw, rec.headers, origin_key)
        except InvalidEvent as exc:
            dead.append(
                DeadLetter(
                    rec.topic,
                    rec.partition,
                    rec.offset,
                    exc.reason,
                    exc.field,
                    exc.detail,
                    raw,
                    rec.key,
                )
            )
            continue
        rows.append(event_row(event, rec.partition, rec.offset))
    return rows, dead


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of at most ``size`` (``size`` >= 1), in order."""
    for i in range(0, len(items), size):
        yield items[i : i + size]
