"""The optional OTLP Kafka topic (``MONITOR_TOPIC_TRACES``, e.g. ``agent-traces``).

Each record's value is one OTLP ``ExportTraceServiceRequest`` in protobuf, as the OpenTelemetry
Collector's ``kafka`` exporter writes it (``encoding: otlp_proto``). ``TraceTopicService`` reads
the topic in its own consumer group (``<consumer_group>-traces``), maps the spans exactly as
``POST /v1/traces`` does (the same ``TraceAssembler``: spans whose trace root has not come yet
wait in Postgres), publishes the events to the events topic through the worker's producer,
settles the mapped traces, and commits the offsets only after the producer acknowledged them
(at-least-once; the deterministic event ids make a replay idempotent). A record that is not a
request is counted as rejected (``monitor_otlp_spans_total{result="bad_record"}``) and skipped;
a record batch the consumer cannot decode (corrupt, an unknown codec) is logged with its
offsets, counted (``result="bad_batch"``) and skipped, the records before it kept
(:class:`monitor.consume.guarded_fetch.GuardedFetch`); when the producer fails the consumer goes
back to the last committed offsets and retries after a pause.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer
from mode import Service

from monitor.config import Settings
from monitor.consume.guarded_fetch import GuardedFetch, ends
from monitor.core.errors import MonitorError, UndecodableBody
from monitor.otel.decode import PROTOBUF, decode_request
from monitor.otel.traces import Prepared, TraceAssembler
from monitor.sdk import EventEmitter
from monitor.telemetry.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.otel.topic")
RETRY_S = 1.0


class TraceTopicService(Service):
    """Consumes ``settings.topic_traces`` for the worker's lifetime (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        metrics: OpsMetrics,
        emitter: EventEmitter,
        assembler: TraceAssembler,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        assert settings.kafka_bootstrap and settings.topic_traces
        self.settings = settings
        self.metrics = metrics
        self.emitter = emitter
        self.assembler = assembler
        self.consumer: AIOKafkaConsumer | None = None
        self.fetcher = GuardedFetch()

    async def on_start(self) -> None:
        self.consumer = AIOKafkaConsumer(
            self.settings.topic_traces,
            bootstrap_servers=self.settings.kafka_bootstrap,
            group_id=f"{self.settings.consumer_group}-traces",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await self.consumer.start()

    @Service.task
    async def _consume(self) -> None:
        assert self.consumer is not None
        while not self.should_stop:
            fetched = await self.fetcher.fetch(self.consumer, timeout_ms=500, max_records=200)
            batches, bad = fetched
            if not batches and not bad:
                continue
            counts = {
                "mapped": 0,
                "dropped": 0,
                "rejected": 0,
                "events": 0,
                "bad_record": 0,
                "bad_batch": len(bad),
                "waiting": 0,
            }
            for b in bad:
                log.error("trace topic: skipped a record batch it cannot decode: %s", b.describe())
            settled: list[Prepared] = []
            try:
                for records in batches.values():
                    for record in records:
                        prepared = await self._one(record.value or b"", counts)
                        if prepared is not None:
                            settled.append(prepared)
                await self.emitter.flush()
                for prepared in settled:  # published: their waiting spans can go
                    await self.assembler.settle(prepared)
            except MonitorError as exc:
                log.error("trace topic: cannot publish events, retrying: %s", exc)
                await asyncio.sleep(RETRY_S)
                self.fetcher.forget(ends(fetched))  # read on from the committed offsets
                for tp in ends(fetched):
                    committed = await self.consumer.committed(tp)
                    if committed is None:
                        await self.consumer.seek_to_beginning(tp)
                    else:
                        self.consumer.seek(tp, committed)
                continue
            await self.consumer.commit(ends(fetched))
            for result, n in counts.items():
                if n:
                    self.metrics.otlp_spans.labels(result).inc(n)
            for prepared in settled:
                self.metrics.otlp(prepared.mapped.failures, prepared.resolutions())

    async def _one(self, value: bytes, counts: dict[str, int]) -> Prepared | None:
        try:
            spans = decode_request(value, PROTOBUF)
        except UndecodableBody as exc:
            counts["bad_record"] += 1
            log.warning("trace topic: skipped a record: %s", exc)
            return None
        prepared = await self.assembler.prepare(spans)
        mapped = prepared.mapped
        for event in mapped.events:
            await self.emitter.send(event)
        counts["waiting"] += prepared.parked
        counts["mapped"] += mapped.mapped
        counts["dropped"] += mapped.dropped
        counts["rejected"] += mapped.rejected
        counts["events"] += len(mapped.events)
        if mapped.errors:
            log.warning("trace topic: rejected spans: %s", "; ".join(mapped.errors))
        return prepared

    async def on_stop(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()
