"""Which disk buffer a gate process opens (I/O edge: the file system), and the decision path
on it.

``monitor gate serve`` calls :func:`open_decision_path`, which opens
the buffer with :func:`open_gate_buffer`; processes sharing a state directory each take a slot
of their own, and a restarted process takes over (and replays) a slot that a dead predecessor
left.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from monitor.auth.origin_key import origin_key
from monitor.config import Settings
from monitor.core.errors import BufferInUse
from monitor.gate.buffer import DiskBuffer
from monitor.gate.decision_outbox import DecisionOutbox
from monitor.gate.producer import DecisionProducer
from monitor.otel.evaluation_export import EvaluationExporter, EvaluationQueue, otlp_headers


class DecisionPath(NamedTuple):
    """Where a gate process's decision events go: its producer, its disk buffer and the outbox
    that sends through the one and spills to the other."""

    producer: DecisionProducer
    buffer: DiskBuffer
    outbox: DecisionOutbox


def open_decision_path(settings: Settings) -> DecisionPath:
    """The gate's decision path from ``settings`` (``kafka_bootstrap`` must be set): a producer
    to the events topic, the buffer :func:`open_gate_buffer` opens, and the outbox over both,
    exporting the decisions as ``gen_ai.evaluation.result`` events to
    ``otel_evaluations_endpoint`` when it is set. Nothing connects until the producer starts."""
    assert settings.kafka_bootstrap
    producer = DecisionProducer(
        settings.kafka_bootstrap,
        settings.topic_events,
        idempotent=settings.kafka_idempotent,
        origin_key=origin_key(settings.gate_origin_key, settings.state_dir),
    )
    buffer = open_gate_buffer(settings)
    evaluations = None
    if settings.otel_evaluations_endpoint:  # the decisions as OpenTelemetry evaluations too
        exporter = EvaluationExporter(
            settings.otel_evaluations_endpoint, otlp_headers(settings.otel_evaluations_headers)
        )
        evaluations = EvaluationQueue(exporter)
    outbox = DecisionOutbox(
        producer.deliver,
        buffer,
        spill_after_s=settings.gate_spill_after_s,
        evaluations=evaluations,
    )
    return DecisionPath(producer, buffer, outbox)


def open_gate_buffer(settings: Settings, slots: int = 64) -> DiskBuffer:
    """The gate's disk buffer: ``gate_buffer_dir`` when set (a second process on it stops with
    BufferInUse); else the first free slot of ``<state_dir>/gate-buffer``, ``gate-buffer-1``,
    ... so that processes sharing a state directory each get one."""
    cap = settings.gate_buffer_max_bytes
    if settings.gate_buffer_dir is not None:
        return DiskBuffer(settings.gate_buffer_dir, max_bytes=cap)
    base = settings.state_dir / "gate-buffer"
    for slot in range(slots):
        try:
            return DiskBuffer(base if slot == 0 else Path(f"{base}-{slot}"), max_bytes=cap)
        except BufferInUse:
            continue
    raise BufferInUse(f"{base}: all {slots} buffer slots are in use by other processes")
