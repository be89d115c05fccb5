"""Operational metrics of the worker, in Prometheus format on ``GET /metrics``.

Each ``OpsMetrics`` owns its own ``CollectorRegistry`` so several workers (or tests) in one
process never share counters. Units: counts are events, latency is seconds, lag is messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics import MetricWrapperBase

from monitor.store.retention import RetentionReport
from monitor.telemetry.loop_lag import LoopLag

CONTENT_TYPE = CONTENT_TYPE_LATEST

M = TypeVar("M", bound=MetricWrapperBase)


def _declare(kind: type[M], registry: CollectorRegistry) -> Callable[..., M]:
    """``declare(name, documentation, *label_names, **options)``: a ``kind`` metric on
    ``registry`` (``options`` such as a histogram's ``buckets``)."""

    def declare(name: str, documentation: str, *label_names: str, **options: Any) -> M:
        return kind(name, documentation, label_names, registry=registry, **options)

    return declare


class OpsMetrics:
    """Counters and gauges of the ingest path (names prefixed ``monitor_``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        GCCollector(registry=self.registry)  # python_gc_*: the collector's runs and what they freed
        counter = _declare(Counter, self.registry)
        gauge = _declare(Gauge, self.registry)
        histogram = _declare(Histogram, self.registry)
        self.events_in = counter("monitor_events_in", "Kafka records read by the ingest loop")
        self.events_invalid = counter(
            "monitor_events_invalid", "Invalid events sent to the DLQ", "reason"
        )
        self.events_written = counter("monitor_events_written", "New events committed to Postgres")
        self.events_duplicate = counter(
            "monitor_events_duplicate", "Events skipped as already stored"
        )
        self.batches = counter("monitor_batches", "Batches committed")
        self.batches_staged = counter(
            "monitor_batches_staged",
            "Writes through the staging table: a batch holding a stored or repeated event_id"
            " (replay, re-delivery); the others are COPYed straight into events",
        )
        self.batch_latency = histogram(
            "monitor_batch_latency_seconds",
            "Decode + write + offset commit time per batch",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.store_errors = counter(
            "monitor_store_errors", "Failed write attempts (retried with backoff)"
        )
        self.dlq_errors = counter(
            "monitor_dlq_publish_errors", "Failed DLQ publish attempts (retried with backoff)"
        )
        self.alerts_flapping = gauge(
            "monitor_alerts_flapping",
            "Alerts marked flapping at the last evaluation (their notifications are held)",
            "rule",
        )
        self._flapping_rules: set[str] = set()
        self.incidents_open = gauge(
            "monitor_incidents_open",
            "Alert incidents open at the last evaluation (an agent's alerts that page once)",
        )
        self.incident_pages = counter(
            "monitor_incident_pages",
            "Pages sent: alert incidents opened, and re-paged on a higher severity",
            "severity",
        )
        self.incident_updates = counter(
            "monitor_incident_updates",
            "Notifications sent as updates of an open incident instead of pages",
        )
        self.consumer_lag = gauge(
            "monitor_consumer_lag", "High watermark minus position", "partition"
        )
        self.paused = gauge(
            "monitor_ingest_paused", "1 while ingest is paused waiting for the store"
        )
        self.since_write = gauge(
            "monitor_seconds_since_last_write",
            "Seconds since the ingest loop last wrote a batch (see /health)",
        )
        self.events_conflicting = counter(
            "monitor_events_conflicting",
            "Duplicate event_ids with a different body, dead-lettered (the first one stays)",
        )
        self.commit_errors = counter(
            "monitor_offset_commit_errors", "Offset commits that failed or timed out"
        )
        self.undecodable_batches = counter(
            "monitor_undecodable_batches",
            "Record batches the ingest consumer could not decode, by codec (dead-lettered as"
            " undecodable_batch and skipped)",
            "codec",
        )
        self.broker_data_loss = counter(
            "monitor_broker_data_loss",
            "Partitions found with a log end below the consumer position (broker lost data)",
        )
        self.http_events = counter("monitor_http_events", "Events posted to /v1/events", "result")
        self.http_client_errors = counter(
            "monitor_http_client_errors",
            "4xx answers of the HTTP endpoints by path and status (401, 408, 413, 415, 429...)",
            "path",
            "status",
        )
        self.http_refused = counter(
            "monitor_http_refused",
            "Requests answered before any endpoint saw them, by reason: aiohttp's parser "
            "refused them (bad_header, bad_chunked, data_after_close...), their body was cut "
            "short, or a view raised (internal_error)",
            "reason",
        )
        self.gate_answers = counter(
            "monitor_gate_answers",
            "POST /v1/gate answers: the decision, the error reason, or 'kept' (a decision event "
            "the broker did not acknowledge in time, buffered on disk and replayed later)",
            "result",
        )
        self.gate_degraded = counter(
            "monitor_gate_degraded_answers",
            "POST /v1/gate answers not made the ordinary way, per policy rule (index) and agent: "
            "kind fail_open / fail_closed (the rule's fail choice decided), deadline (checks past "
            "deadline_ms), llm_timeout / llm_error (on_llm_timeout decided), maps_stale "
            "(answered from maps whose refresh failed)",
            "rule",
            "agent",
            "kind",
        )
        self.gate_buffered = gauge(
            "monitor_gate_buffered_events",
            "Decision events on the gate's disk buffer, not yet acknowledged by the broker",
        )
        self.gate_buffer_oldest = gauge(
            "monitor_gate_buffer_oldest_age_seconds",
            "Age of the oldest decision event on the gate's disk buffer (0 when empty)",
        )
        self.gate_evaluations = gauge(
            "monitor_gate_evaluations_exported",
            "Gate decisions sent as gen_ai.evaluation.result events since the process started, "
            "by result (ok, failed: the endpoint refused or was unreachable after the retries, "
            "dropped: more than the export queue holds were waiting)",
            "result",
        )
        self.gate_dropped = gauge(
            "monitor_gate_decision_events_dropped",
            "Decision events lost since the worker started, by reason (full: buffer size cap; "
            "corrupt: unreadable segment tail; write_error: the disk refused; refused: the "
            "broker refused the record for good)",
            "reason",
        )
        self.otlp_spans = counter(
            "monitor_otlp_spans",
            "Spans posted to /v1/traces by fate (mapped, dropped, rejected, waiting: parked "
            "until their trace's root; events: events made; on the traces topic, bad_record "
            "and bad_batch: records and record batches skipped as undecodable)",
            "result",
        )
        self.otlp_log_records = counter(
            "monitor_otlp_log_records",
            "Log records posted to /v1/logs by fate: joined (a GenAI event given to its span as "
            "its trace was mapped), waiting (parked until its span's trace is mapped), late (its "
            "trace was mapped before it came: not used), dropped (not a GenAI event), rejected "
            "(a GenAI event naming no span), expired (waited past the deadline: its span "
            "never came)",
            "result",
        )
        self.otlp_grpc_errors = counter(
            "monitor_otlp_grpc_errors",
            "OTLP/gRPC calls answered with an error, by method and gRPC status code "
            "(UNAUTHENTICATED, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE...); gRPC's "
            "own refusals before the handler (a message above the size limit) are not counted",
            "method",
            "code",
        )
        self.otlp_failures = counter(
            "monitor_otlp_failures",
            "Failed operations seen in mapped spans, by kind (llm_call, tool, agent)",
            "kind",
        )
        self.otlp_traces = counter(
            "monitor_otlp_traces",
            "Traces mapped, by how they were resolved (root: with their root; late: spans after "
            "their root; deadline / overflow: under the fallback, the trace id as conversation)",
            "how",
        )
        self.evaluations_exported = counter(
            "monitor_evaluations_exported",
            "Judge verdicts sent as gen_ai.evaluation.result events, by result (ok, failed)",
            "result",
        )
        self.otlp_pending_spans = gauge(
            "monitor_otlp_pending_spans", "Spans waiting in Postgres for their trace's root"
        )
        self.otlp_pending_records = gauge(
            "monitor_otlp_pending_log_records",
            "GenAI log records waiting in Postgres for their span's trace to be mapped",
        )
        # judging
        self.judge_requests = counter("monitor_judge_requests", "Conversations sent to the judges")
        self.judge_rejudges = counter(
            "monitor_judge_rejudges",
            "Conversations sent to the judges again: they stored events after they were judged "
            "(included in monitor_judge_requests_total)",
        )
        self.judged = counter("monitor_judged_conversations", "Judge requests completed")
        self.judge_requests_resent = counter(
            "monitor_judge_requests_resent",
            "Judge requests published again: no verdicts long after they were sent (lost on the "
            "topic or never finished)",
        )
        self.judge_requests_skipped = counter(
            "monitor_judge_requests_skipped",
            "Judge request records (malformed) and record batches (undecodable_batch) the judge "
            "consumer skipped",
            "reason",
        )
        self.verdicts = counter("monitor_verdicts", "Verdicts produced", "judge", "status")
        self.judge_latency = histogram(
            "monitor_judge_latency_seconds",
            "Time to judge one conversation with every judge",
            buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        # the event loop
        self.event_loop_stall = gauge(
            "monitor_event_loop_stall_seconds",
            "Longest event-loop stall in the last minute: how late a 50 ms wake-up came",
        )
        self.event_loop_lag = histogram(
            "monitor_event_loop_lag_seconds",
            "How late each 50 ms wake-up of the event-loop probe came (the loop held that long)",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )

        self.retention_runs = counter(
            "monitor_retention_runs",
            "Retention runs by result (ok, partial: a step failed, skipped: another worker ran it)",
            "result",
        )
        self.retention_partitions = counter(
            "monitor_retention_partitions",
            "Daily events partitions by action (created, dropped; emptied: a day's leaf of "
            "unsampled events truncated)",
            "action",
        )
        self.retention_rows = counter(
            "monitor_retention_rows_deleted", "Rows deleted by retention, per kind", "kind"
        )
        self.retention_last_ok = gauge(
            "monitor_retention_last_success_timestamp_seconds",
            "Unix time of the last retention run with no failed step",
        )

    def retention(self, report: RetentionReport, unix_now: float) -> None:
        """Count one retention run (:func:`monitor.store.retention.run_retention`)."""
        if not report.ran:
            self.retention_runs.labels("skipped").inc()
            return
        self.retention_runs.labels("partial" if report.failed else "ok").inc()
        self.retention_partitions.labels("created").inc(report.partitions_created)
        self.retention_partitions.labels("dropped").inc(report.partitions_dropped)
        self.retention_partitions.labels("emptied").inc(report.unsampled_emptied)
        for kind, rows in report.deleted.items():
            self.retention_rows.labels(kind).inc(rows)
        if not report.failed:
            self.retention_last_ok.set(unix_now)

    def otlp(
        self,
        failures: dict[str, int],
        traces: dict[str, int],
        records: dict[str, int] | None = None,
    ) -> None:
        """Count the failures, trace resolutions and log records of one mapped request or
        sweep."""
        for kind, n in failures.items():
            self.otlp_failures.labels(kind).inc(n)
        for how, n in traces.items():
            self.otlp_traces.labels(how).inc(n)
        for result, n in (records or {}).items():
            self.otlp_log_records.labels(result).inc(n)

    def set_gate_outbox(self, status: dict[str, Any]) -> None:
        """The gate's buffer gauges from :meth:`DecisionOutbox.status` (set at scrape time)."""
        self.gate_buffered.set(status["buffered"])
        self.gate_buffer_oldest.set(status["oldest_age_s"] or 0.0)
        for reason in ("full", "corrupt", "write_error", "refused"):
            self.gate_dropped.labels(reason).set(status["dropped_by_reason"].get(reason, 0))
        for result, n in (status.get("evaluations") or {}).items():
            self.gate_evaluations.labels(result).set(n)

    def watch_loop(self, lag: LoopLag) -> None:
        """Export ``lag``: its recent longest stall as the gauge (read at scrape time), each
        wake-up's lag into the histogram."""
        lag.observe = self.event_loop_lag.observe
        self.event_loop_stall.set_function(lag.recent_max)

    def alerts(self, flapping: Mapping[str, str]) -> None:
        """Record an evaluation's flapping alerts (fingerprint -> rule) as
        ``monitor_alerts_flapping{rule}``; rules no longer flapping drop to 0."""
        counts: dict[str, int] = {}
        for rule in flapping.values():
            counts[rule] = counts.get(rule, 0) + 1
        for rule in self._flapping_rules - counts.keys():
            self.alerts_flapping.labels(rule=rule).set(0)
        self._flapping_rules |= counts.keys()
        for rule, n in counts.items():
            self.alerts_flapping.labels(rule=rule).set(n)

    def incidents(self, open_now: int, page_severities: Sequence[str], updates: int) -> None:
        """Record an evaluation's incidents: how many are open (``monitor_incidents_open``),
        the severity of each page it sent (``monitor_incident_pages_total{severity}``) and
        its updates (``monitor_incident_updates_total``)."""
        self.incidents_open.set(open_now)
        for severity in page_severities:
            self.incident_pages.labels(severity=severity).inc()
        if updates:
            self.incident_updates.inc(updates)

    def render(self) -> bytes:
        """The text exposition format of every metric."""
        return generate_latest(self.registry)
