"""Judge verdicts and gate decisions as OpenTelemetry ``gen_ai.evaluation.result`` events
(pure encoding).

``evaluation_request(verdicts, service, now_nanos)`` is an OTLP ``ExportLogsServiceRequest``
(protobuf, ``opentelemetry-proto``) with one log record per verdict, per the GenAI semantic
conventions 1.37 evaluation event: ``event_name`` ``gen_ai.evaluation.result``, attributes
``gen_ai.evaluation.name`` (the judge), ``gen_ai.evaluation.score.value`` (the score, or the
label when the judge gave no score), ``gen_ai.evaluation.score.label`` (``pass``/``fail``),
``gen_ai.evaluation.explanation`` (the rationale), ``error.type`` (``judge_error`` for an error
verdict), and ``gen_ai.conversation.id``. A verdict on an item the monitor made from a span
(event id ``otel:<trace>:<span>:...``) carries that trace and span id, so a trace backend shows
the score on the evaluated span; other verdicts carry no trace context.

``gate_record(event, now_nanos)`` is the same event for a runtime gate decision (an
agent-event/v1 ``gate`` event): ``gen_ai.evaluation.name`` ``gate:<policy version>`` (the
policy that decided), ``gen_ai.evaluation.score.value`` the calibrated probability,
``gen_ai.evaluation.score.label`` the decision (``proceed``, ``revise``, ``escalate``),
``gen_ai.evaluation.explanation`` the findings' critiques (or why the decision was degraded),
and the decision's id, agent, stated confidence, threshold and its source, enforcement.
``logs_request(records, service, scope)`` wraps records in one request.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from monitor.contract.events import AgentEvent


class Verdict(Protocol):
    """What is exported of a verdict (``monitor.judges.base.Verdict`` has these fields)."""

    @property
    def judge(self) -> str: ...
    @property
    def judge_version(self) -> str: ...
    @property
    def conversation_id(self) -> str: ...
    @property
    def item_id(self) -> str | None: ...
    @property
    def status(self) -> str: ...
    @property
    def label(self) -> int | None: ...
    @property
    def score(self) -> float | None: ...
    @property
    def rationale(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...


EVENT_NAME = "gen_ai.evaluation.result"
SCOPE = "agent-reliability-monitor.judges"
GATE_SCOPE = "agent-reliability-monitor.gate"
_SPAN_ITEM = re.compile(r"^otel:([0-9a-f]{32}):([0-9a-f]{16}):")
SEVERITY_INFO = 9
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def span_of(item_id: str | None) -> tuple[bytes, bytes] | None:
    """(trace id, span id) of an item made from a span, else None."""
    found = _SPAN_ITEM.match(item_id or "")
    if found is None:
        return None
    return bytes.fromhex(found.group(1)), bytes.fromhex(found.group(2))


def evaluation_record(verdict: Verdict, now_nanos: int) -> LogRecord:
    """The ``gen_ai.evaluation.result`` event of one verdict (see the module docstring)."""
    attrs: dict[str, Any] = {
        "gen_ai.evaluation.name": verdict.judge,
        "gen_ai.conversation.id": verdict.conversation_id,
        "monitor.judge.version": verdict.judge_version,
    }
    score = verdict.score if verdict.score is not None else verdict.label
    if score is not None:
        attrs["gen_ai.evaluation.score.value"] = float(score)
    if verdict.label is not None:
        attrs["gen_ai.evaluation.score.label"] = "pass" if verdict.label == 1 else "fail"
    if verdict.rationale:
        attrs["gen_ai.evaluation.explanation"] = verdict.rationale
    if verdict.status == "error":
        attrs["error.type"] = "judge_error"
        attrs["gen_ai.evaluation.explanation"] = verdict.error or "error"
    if verdict.item_id:
        attrs["monitor.item_id"] = verdict.item_id
    record = LogRecord(
        time_unix_nano=now_nanos,
        observed_time_unix_nano=now_nanos,
        severity_number=SEVERITY_INFO,  # type: ignore[arg-type]
        event_name=EVENT_NAME,
        attributes=[KeyValue(key=k, value=_any(v)) for k, v in attrs.items()],
    )
    span = span_of(verdict.item_id)
    if span is not None:
        record.trace_id, record.span_id = span
    return record


def gate_record(event: AgentEvent, now_nanos: int) -> LogRecord:
    """The ``gen_ai.evaluation.result`` event of a gate decision event (see the module
    docstring); raises ValueError for an event of another type."""
    gate = event.gate
    if gate is None:
        raise ValueError(f"event {event.event_id} is not a gate decision")
    attrs: dict[str, Any] = {
        "gen_ai.evaluation.name": f"gate:{gate.policy_version}",
        "gen_ai.evaluation.score.value": float(gate.calibrated),
        "gen_ai.evaluation.score.label": gate.decision,
        "gen_ai.conversation.id": event.conversation_id,
        "gen_ai.agent.id": event.agent.id,
        "monitor.gate.decision_id": event.event_id,
        "monitor.gate.confidence": float(gate.confidence),
        "monitor.gate.threshold": float(gate.threshold),
        "monitor.gate.threshold_source": gate.threshold_source,
        "monitor.gate.enforced": gate.enforced,
    }
    critiques = "; ".join(f"{f.judge}: {f.critique}" for f in gate.findings)
    if critiques or gate.degraded:
        attrs["gen_ai.evaluation.explanation"] = critiques or gate.degraded
    if gate.degraded:
        attrs["monitor.gate.degraded"] = gate.degraded
    at = (event.ts - _EPOCH) // timedelta(microseconds=1) * 1000  # exact, no float
    return LogRecord(
        time_unix_nano=at,
        observed_time_unix_nano=now_nanos,
        severity_number=SEVERITY_INFO,  # type: ignore[arg-type]
        event_name=EVENT_NAME,
        attributes=[KeyValue(key=k, value=_any(v)) for k, v in attrs.items()],
    )


def logs_request(
    records: Sequence[LogRecord], service: str, scope: str
) -> ExportLogsServiceRequest:
    """One request with ``records`` under the resource ``service.name=service`` and the
    instrumentation scope ``scope``."""
    request = ExportLogsServiceRequest()
    rl = request.resource_logs.add()
    rl.resource.attributes.append(KeyValue(key="service.name", value=_any(service)))
    sl = rl.scope_logs.add()
    sl.scope.name = scope
    sl.log_records.extend(records)
    return request


def evaluation_request(
    verdicts: Sequence[Verdict], service: str, now_nanos: int
) -> ExportLogsServiceRequest:
    """One request with every verdict's event, under the resource ``service.name=service``."""
    return logs_request([evaluation_record(v, now_nanos) for v in verdicts], service, SCOPE)


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    return AnyValue(string_value=str(value))
