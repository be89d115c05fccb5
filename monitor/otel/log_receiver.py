"""``POST /v1/logs`` (OTLP/HTTP) as a pure async function; app.py only wires it to faust.

The same steps and answers as ``POST /v1/traces`` (:func:`monitor.otel.receiver.receive_otlp`:
the credential with the ``write`` scope, the rate, the media type, the content encoding, the
body under the same limits; 401/403/429/415/413/408/400/503 as there), then the records:

- GenAI event records (:mod:`monitor.otel.log_events`) that name their span are handed to the
  trace assembly with the request's scope (:meth:`TraceAssembler.handle`): joined to their span
  when its trace is mapped (in this request, or later when the spans come), waiting in the
  store until then; a request that completes a trace publishes the trace's events before the
  answer, as ``/v1/traces`` does;
- GenAI event records with no span context are rejected (``partial_success``);
- other log records are counted (``dropped``) and dropped;
- more records than ``max_spans`` in one request: 413.

The answer is an ``ExportLogsServiceResponse`` (``rejected_log_records`` and the first reasons,
including events of agents outside the key's scope) in the request's encoding;
``Answer.records`` counts the records by fate (``joined``, ``waiting``, ``late``, ``dropped``,
``rejected``) and ``Answer.counts`` the spans the request mapped.
"""

from __future__ import annotations

import asyncio

from monitor.auth.admission import Authorize
from monitor.auth.authorizer import Grant
from monitor.contract.events import Publish
from monitor.core.http_body import ReadChunk
from monitor.core.http_guard import Guard
from monitor.core.http_reply import Offload, inline
from monitor.otel.decode_logs import LogBatch, decode_logs, encode_logs_response
from monitor.otel.mapping import Mapped
from monitor.otel.receiver import (
    Answer,
    Scoped,
    TraceLimits,
    decode_within,
    outcome,
    receive_otlp,
    unless_unavailable,
)
from monitor.otel.traces import TraceAssembler


async def export_records(
    batch: LogBatch, grant: Grant, publish: Publish, assembler: TraceAssembler
) -> tuple[Answer, int, str]:
    """Join and publish decoded records under ``grant``: the answer's counts, the records
    rejected and the first reasons. Raises MonitorError when the event bus or the store is
    unavailable."""
    scoped = Scoped(grant, publish)
    prepared = await assembler.handle([], scoped, grant.agents, batch.events)
    mapped = scoped.settle(prepared)
    answer = outcome(prepared, mapped)
    if batch.other:
        answer.records["dropped"] = batch.other
    if batch.rejected:
        answer.records["rejected"] = len(batch.rejected)
    reasons = Mapped()
    for reason in [*batch.rejected, *scoped.out_of_scope]:
        reasons.reject(reason)
    return answer, reasons.rejected, "; ".join(reasons.errors)


async def receive_logs(
    *,
    authorization: str | None,
    content_type: str | None,
    content_encoding: str | None,
    content_length: str | None,
    read_chunk: ReadChunk,
    publish: Publish,
    authorize: Authorize,
    limits: TraceLimits,
    guard: Guard,
    assembler: TraceAssembler,
    peer: str | None = None,
    offload: Offload = inline,
    slots: asyncio.Semaphore | None = None,
) -> Answer:
    """Handle one logs export request (see the module docstring)."""

    async def handle(body: bytes, kind: str, grant: Grant) -> Answer:
        batch = await decode_within(
            body, kind, decode_logs, lambda b: b.records, "log records", limits, offload
        )
        if isinstance(batch, Answer):
            return batch

        async def export() -> Answer:
            answer, rejected, message = await export_records(batch, grant, publish, assembler)
            answer.body = encode_logs_response(kind, rejected, message)
            return answer

        return await unless_unavailable(kind, export)

    return await receive_otlp(
        authorization=authorization,
        content_type=content_type,
        content_encoding=content_encoding,
        content_length=content_length,
        read_chunk=read_chunk,
        authorize=authorize,
        limits=limits,
        guard=guard,
        handle=handle,
        peer=peer,
        slots=slots,
    )
