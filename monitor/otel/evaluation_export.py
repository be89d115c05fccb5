"""Send judge verdicts to an OTLP/HTTP logs endpoint as ``gen_ai.evaluation.result`` events.

``EvaluationExporter.export(verdicts)`` POSTs one ``ExportLogsServiceRequest`` (protobuf,
``monitor.otel.evaluations``) to ``endpoint`` (the full URL, e.g.
``http://collector:4318/v1/logs``) with the configured headers, retrying a 429/5xx or a
connection error ``retries`` times with a doubling pause. It returns True when the endpoint
accepted the request and False otherwise (logged and counted by the caller): exporting
evaluations never blocks or fails judging. The HTTP transport and the clock are injected.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import httpx

from monitor.otel.evaluations import Verdict, evaluation_request

log = logging.getLogger("monitor.otel.evaluation_export")
RETRYABLE = frozenset({429, 502, 503, 504})


class EvaluationExporter:
    """See the module docstring."""

    def __init__(
        self,
        endpoint: str,
        headers: dict[str, str] | None = None,
        *,
        service: str = "agent-reliability-monitor",
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
        body = evaluation_request(verdicts, self.service, self.now_nanos()).SerializeToString()
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
