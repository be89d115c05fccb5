"""The gate's own Kafka producer: one decision event, one acknowledgement (I/O edge: aiokafka).

Separate from the HTTP ingest producer so that a decision event's failure is reported to the
outbox that sent it (and never to an unrelated ``POST /v1/events`` flush), and so that each
send can be awaited until the broker acknowledged it (``acks=all``). The producer connects
lazily: a gate process that starts while the broker is down still answers, and the first send after
the broker is back connects.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError, RecordListTooLargeError

from monitor.contract.origin import ORIGIN_HEADER, origin_tag
from monitor.core.errors import Refused

log = logging.getLogger("monitor.gate.producer")


class DecisionProducer:
    """``await deliver(key, value)`` returns once the broker acknowledged the record, raises
    otherwise (the broker refused it, or ``request_timeout_ms`` passed). Each record carries
    its origin tag under ``origin_key`` (:mod:`monitor.contract.origin`; None: no tag): the
    ingest accepts a gate decision id only with it."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        idempotent: bool,
        origin_key: bytes | None = None,
        request_timeout_ms: int = 30_000,
    ) -> None:
        self.topic = topic
        self._origin_key = origin_key
        self._config: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "acks": "all",
            "enable_idempotence": idempotent,
            "linger_ms": 20,
            "request_timeout_ms": request_timeout_ms,
            "client_id": "agent-monitor-gate",
        }
        self._producer: AIOKafkaProducer | None = None
        self._starting = asyncio.Lock()
        self._closed = False

    async def _started(self) -> AIOKafkaProducer:
        if self._producer is not None:
            return self._producer
        async with self._starting:
            if self._closed:
                raise RuntimeError("the gate's producer is closed")
            if self._producer is None:
                producer = AIOKafkaProducer(**self._config)
                try:
                    await producer.start()
                except BaseException:
                    await producer.stop()
                    raise
                self._producer = producer
        return self._producer

    async def deliver(self, key: bytes, value: bytes) -> None:
        """Send one record and wait for its acknowledgement. Raises :class:`Refused` when the
        record itself is refused (too large: no retry can help), the client's error otherwise."""
        producer = await self._started()
        try:
            key_ = self._origin_key
            headers = [(ORIGIN_HEADER, origin_tag(key_, value))] if key_ is not None else None
            future = await producer.send(self.topic, value=value, key=key, headers=headers)
            await future
        except (MessageSizeTooLargeError, RecordListTooLargeError) as exc:
            raise Refused(f"{type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        """Stop the producer (records not yet acknowledged fail; the outbox has them)."""
        self._closed = True
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await asyncio.wait_for(producer.stop(), 10)
            except Exception as exc:
                log.warning("gate producer did not stop cleanly: %s", exc)
