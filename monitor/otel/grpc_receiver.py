"""OTLP/gRPC: the official collector services ``TraceService/Export`` and ``LogsService/Export``
answered by the same logic as ``POST /v1/traces`` and ``POST /v1/logs`` (docs/otel.md).

:func:`grpc_server` builds (without binding) a ``grpc.aio`` server with both methods, their
names taken from the official ``opentelemetry-proto`` service descriptors. Each request's
message arrives as bytes (grpc inflates a ``grpc-encoding: gzip`` message; its decompressed
size is capped by ``grpc.max_receive_message_length`` = ``max_body_bytes``, RESOURCE_EXHAUSTED
above) and goes through :func:`monitor.otel.receiver.receive_traces` /
:func:`monitor.otel.log_receiver.receive_logs` as a protobuf body: the same credential (the
``authorization`` metadata, ``Bearer <token>``), rate, body slots, decoding, limits and
mapping. The HTTP answer becomes the gRPC status the OTLP specification maps it to: 200 OK with
the ``Export*ServiceResponse`` (``partial_success`` as over HTTP), 400 INVALID_ARGUMENT, 401
UNAUTHENTICATED, 403 PERMISSION_DENIED, 413 RESOURCE_EXHAUSTED (not retryable: no RetryInfo),
429 RESOURCE_EXHAUSTED with ``RetryInfo`` (the ``Retry-After`` delay, in the status details
``grpc-status-details-bin`` and in ``google.rpc.retryinfo-bin``, where the OTel exporters read
it), 503 UNAVAILABLE with ``RetryInfo`` (the event bus or the store refused), 408
DEADLINE_EXCEEDED. ``count`` is called with each answer and its method (``/metrics``).

:func:`otlp_receivers` binds both endpoints' logic to the worker's publish, credentials, guard,
limits, assembler, parse pool and body slots (the HTTP routes' own); :class:`OtlpGrpcService`
runs the server for the worker's lifetime on ``web_host:otlp_grpc_port``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2
from mode import Service
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from monitor.auth.admission import Authorize
from monitor.config import Settings
from monitor.contract.events import Publish
from monitor.core.errors import InfraError
from monitor.core.http_body import ReadChunk
from monitor.core.http_guard import Guard
from monitor.core.http_reply import Offload
from monitor.otel.decode import PROTOBUF
from monitor.otel.log_receiver import receive_logs
from monitor.otel.mapping import MappingConfig
from monitor.otel.receiver import Answer, TraceLimits, receive_traces
from monitor.otel.traces import TraceAssembler
from monitor.telemetry.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.otel.grpc_receiver")

TRACE_SERVICE = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
LOGS_SERVICE = logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name

# Receives one export request: its authorization metadata, peer and message bytes.
Receive = Callable[[str | None, str | None, bytes], Awaitable[Answer]]
Count = Callable[[str, Answer], None]


def grpc_server(
    traces: Receive,
    logs: Receive,
    *,
    max_message_bytes: int,
    count: Count | None = None,
) -> grpc.aio.Server:
    """A server (not bound, not started) exporting both services through ``traces`` and
    ``logs`` (see the module docstring)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", 4 * 1024 * 1024),
        ]
    )
    handlers = [
        grpc.method_handlers_generic_handler(
            service,
            {"Export": grpc.unary_unary_rpc_method_handler(_export(receive, service, count))},
        )
        for service, receive in ((TRACE_SERVICE, traces), (LOGS_SERVICE, logs))
    ]
    server.add_generic_rpc_handlers(handlers)
    return server


def _export(
    receive: Receive, service: str, count: Count | None
) -> Callable[[bytes, grpc.aio.ServicerContext[Any, Any]], Awaitable[bytes]]:
    method = f"/{service}/Export"

    async def handle(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        metadata = {k.lower(): v for k, v in context.invocation_metadata() or ()}
        authorization = metadata.get("authorization")
        answer = await receive(
            authorization if isinstance(authorization, str) else None,
            _peer(context.peer()),
            request,
        )
        if count is not None:
            count(method, answer)
        if answer.status == 200:
            return answer.body
        await _abort(context, answer)
        raise AssertionError("unreachable: abort raises")

    return handle


async def _abort(context: grpc.aio.ServicerContext[Any, Any], answer: Answer) -> None:
    """End the call with the gRPC status of an error answer (its ``google.rpc.Status`` body)."""
    status = status_pb2.Status()
    if answer.content_type == PROTOBUF:
        status.ParseFromString(answer.body)
    else:  # refusals before the media type is known are JSON: rebuilt from the HTTP status
        status.code, status.message = _CODES.get(answer.status, 2), answer.body.decode()[:500]
    trailing: list[tuple[str, bytes]] = []
    retry_after = answer.headers.get("Retry-After")
    if retry_after is not None and answer.status in (429, 503):
        info = error_details_pb2.RetryInfo(retry_delay=Duration(seconds=_seconds(retry_after)))
        status.details.add().Pack(info)
        trailing.append(("google.rpc.retryinfo-bin", info.SerializeToString()))
    trailing.append(("grpc-status-details-bin", status.SerializeToString()))
    await context.abort(
        _STATUS.get(status.code, grpc.StatusCode.UNKNOWN), status.message, tuple(trailing)
    )


def _seconds(text: str) -> int:
    try:
        return max(0, int(float(text)))
    except ValueError:
        return 1


def _peer(peer: str | None) -> str | None:
    """The client's address of a gRPC peer string (``ipv4:127.0.0.1:5123``, ``ipv6:[::1]:9``),
    the bucket key of the per-address rate, as the HTTP endpoints use the remote address."""
    if not peer:
        return None
    _, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0] if ":" in rest else rest
    return host.strip("[]") or peer


_CODES = {400: 3, 401: 16, 403: 7, 408: 4, 413: 8, 415: 3, 429: 8, 503: 14}
_STATUS = {code.value[0]: code for code in grpc.StatusCode}


def _once(body: bytes) -> ReadChunk:
    pieces = [body]

    async def read_chunk() -> bytes:
        return pieces.pop() if pieces else b""

    return read_chunk


def otlp_receivers(
    *,
    publish: Publish,
    authorize: Authorize,
    limits: TraceLimits,
    config: MappingConfig,
    guard: Guard,
    assembler: TraceAssembler,
    offload: Offload,
    slots: asyncio.Semaphore | None,
) -> tuple[Receive, Receive]:
    """The traces and logs ``Receive`` of a gRPC server: each message handled as an HTTP
    protobuf body by ``receive_traces`` / ``receive_logs`` with these collaborators."""

    def request(authorization: str | None, peer: str | None, body: bytes) -> dict[str, Any]:
        return {
            "authorization": authorization,
            "content_type": PROTOBUF,
            "content_encoding": None,  # grpc inflated the message
            "content_length": str(len(body)),
            "read_chunk": _once(body),
            "publish": publish,
            "authorize": authorize,
            "limits": limits,
            "guard": guard,
            "assembler": assembler,
            "peer": peer,
            "offload": offload,
            "slots": slots,
        }

    async def traces(authorization: str | None, peer: str | None, body: bytes) -> Answer:
        return await receive_traces(**request(authorization, peer, body), config=config)

    async def logs(authorization: str | None, peer: str | None, body: bytes) -> Answer:
        return await receive_logs(**request(authorization, peer, body))

    return traces, logs


def counted(metrics: OpsMetrics) -> Count:
    """Count each gRPC answer as the HTTP routes count theirs (spans, log records, failures,
    traces), and each error by method and gRPC code."""

    def count(method: str, answer: Answer) -> None:
        for result, n in answer.counts.items():
            metrics.otlp_spans.labels(result).inc(n)
        metrics.otlp(answer.failures, answer.traces, answer.records)
        if answer.status != 200:
            code = _STATUS.get(_CODES.get(answer.status, 2), grpc.StatusCode.UNKNOWN)
            metrics.otlp_grpc_errors.labels(method, code.name).inc()

    return count


def endpoint(host: str, port: int) -> str:
    """``host:port`` as gRPC binds it (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class OtlpGrpcService(Service):
    """The OTLP/gRPC server for the worker's lifetime on ``web_host:otlp_grpc_port``; a port
    that cannot be bound stops the worker's start (InfraError)."""

    def __init__(
        self,
        settings: Settings,
        receivers: tuple[Receive, Receive],
        metrics: OpsMetrics,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.receivers = receivers
        self.metrics = metrics
        self.server: grpc.aio.Server | None = None

    async def on_start(self) -> None:
        traces, logs = self.receivers
        server = grpc_server(
            traces,
            logs,
            max_message_bytes=self.settings.http_max_body_bytes,
            count=counted(self.metrics),
        )
        where = endpoint(self.settings.web_host, self.settings.otlp_grpc_port)
        try:
            bound = server.add_insecure_port(where)
        except RuntimeError as exc:
            raise InfraError(f"OTLP/gRPC: cannot listen on {where}: {exc}") from exc
        if not bound:
            raise InfraError(f"OTLP/gRPC: cannot listen on {where}")
        await server.start()
        self.server = server
        log.info("OTLP/gRPC receiver listening on %s", where)

    async def on_stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=2.0)
