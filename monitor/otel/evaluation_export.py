"""Send judge verdicts and gate decisions to an OTLP/HTTP logs endpoint as
``gen_ai.evaluation.result`` events.

``EvaluationExporter.export(verdicts)`` POSTs one ``ExportLogsServiceRequest`` (protobuf,
``monitor.otel.evaluations``) to ``endpoint`` (the full URL, e.g.
``http://collector:4318/v1/logs``) with the configured headers, retrying a 429/5xx or a
connection error ``retries`` times with a doubling pause; ``export_records`` does the same for
ready records (the gate's). It returns True when the endpoint accepted the request and False
otherwise (logged and counted by the caller): exporting evaluations never blocks or fails
judging. The HTTP transport and the clock are injected.

``EvaluationQueue`` is the gate's side: ``add(event)`` takes a decision event without waiting
(never on the answer's path; beyond ``max_queued`` waiting events it drops and counts), a task
of its own sends them in batches of at most ``batch`` every ``interval_s``, and ``aclose``
sends what is left (for a bounded time). ``counts`` holds the events by result (``ok``,
``failed``, ``dropped``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from urllib.parse import unquote

import httpx
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from monitor.contract.events import AgentEvent
from monitor.otel.evaluations import (
    GATE_SCOPE,
    Verdict,
    evaluation_request,
    gate_record,
    logs_request,
)

log = logging.getLogger("monitor.otel.evaluation_export")
RETRYABLE = frozenset({429, 502, 503, 504})
SERVICE = "agent-reliability-monitor"


def otlp_headers(text: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` with URL-encoded values (the OTEL_EXPORTER_OTLP_HEADERS format)."""
    out: dict[str, str] = {}
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip():
            out[key.strip()] = unquote(value.strip())
    return out


class EvaluationExporter:
    """See the module docstring."""

    def __init__(
        self,
        endpoint: str,
        headers: dict[str, str] | None = None,
        *,
        service: str = SERVICE,
        retries: int = 2,
        pause_s: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
        now_nanos: Callable[[], int] = time.time_ns,
    ) -> None:
        self.endpoint = endpoint
        self.headers = {"Content-Type": "application/x-protobuf", **(headers or {})}
        self.service = service
        self.retries = retries
        self.pause_s = pause_s
        self.now_nanos = now_nanos
        self.client = httpx.AsyncClient(transport=transport, timeout=10.0)

    async def export(self, verdicts: Sequence[Verdict]) -> bool:
        if not verdicts:
            return True
        request = evaluation_request(verdicts, self.service, self.now_nanos())
        return await self._send(request.SerializeToString())

    async def export_records(self, records: Sequence[LogRecord], scope: str) -> bool:
        """Send ready ``records`` under the instrumentation scope ``scope``."""
        if not records:
            return True
        return await self._send(logs_request(records, self.service, scope).SerializeToString())

    async def _send(self, body: bytes) -> bool:
        pause = self.pause_s
        for attempt in range(self.retries + 1):
            try:
                response = await self.client.post(self.endpoint, content=body, headers=self.headers)
            except httpx.HTTPError as exc:
                reason = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 300:
                    return True
                reason = f"HTTP {response.status_code}"
                if response.status_code not in RETRYABLE and response.status_code < 500:
                    break
            if attempt < self.retries:
                await asyncio.sleep(pause)
                pause *= 2
        log.warning("evaluation export to %s failed: %s", self.endpoint, reason)
        return False

    async def aclose(self) -> None:
        await self.client.aclose()


class EvaluationQueue:
    """Gate decisions exported in the background (see the module docstring)."""

    def __init__(
        self,
        exporter: EvaluationExporter,
        *,
        batch: int = 500,
        interval_s: float = 1.0,
        max_queued: int = 10_000,
    ) -> None:
        self.exporter = exporter
        self.batch = batch
        self.interval_s = interval_s
        self.max_queued = max_queued
        self.counts = {"ok": 0, "failed": 0, "dropped": 0}
        self._queued: list[LogRecord] = []
        self._sending = 0  # records of the batch being sent
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closing = False

    def add(self, event: AgentEvent) -> None:
        """Queue a gate decision event's evaluation; returns at once."""
        if event.gate is None or self._closing:
            return
        if len(self._queued) >= self.max_queued:
            self.counts["dropped"] += 1
            return
        self._queued.append(gate_record(event, self.exporter.now_nanos()))
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())
        if len(self._queued) >= self.batch:
            self._wake.set()

    async def _run(self) -> None:
        while self._queued:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Send everything queued now, in batches."""
        while self._queued:
            records, self._queued = self._queued[: self.batch], self._queued[self.batch :]
            self._sending = len(records)
            ok = await self.exporter.export_records(records, GATE_SCOPE)
            self._sending = 0
            self.counts["ok" if ok else "failed"] += len(records)

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (for at most ``timeout_s``: what is left then is counted
        ``failed``), then close the client."""
        self._closing = True
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self.flush())
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(self._task, timeout_s)
        self.counts["failed"] += len(self._queued) + self._sending
        self._queued.clear()
        await self.exporter.aclose()
