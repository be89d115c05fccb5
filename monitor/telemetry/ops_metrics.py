"""Operational metrics of the worker, in Prometheus format on ``GET /metrics``.

Each ``OpsMetrics`` owns its own ``CollectorRegistry`` so several workers (or tests) in one
process never share counters. Units: counts are events, latency is seconds, lag is messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from monitor.store.retention import RetentionReport
from monitor.telemetry.loop_lag import LoopLag

CONTENT_TYPE = CONTENT_TYPE_LATEST


class OpsMetrics:
    """Counters and gauges of the ingest path (names prefixed ``monitor_``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.events_in = Counter(
            "monitor_events_in", "Kafka records read by the ingest loop", registry=r
        )
        self.events_invalid = Counter(
            "monitor_events_invalid", "Invalid events sent to the DLQ", ["reason"], registry=r
        )
        self.events_written = Counter(
            "monitor_events_written", "New events committed to Postgres", registry=r
        )
        self.events_duplicate = Counter(
            "monitor_events_duplicate", "Events skipped as already stored", registry=r
        )
        self.batches = Counter("monitor_batches", "Batches committed", registry=r)
        self.batches_staged = Counter(
            "monitor_batches_staged",
            "Writes through the staging table: a batch holding a stored or repeated event_id"
            " (replay, re-delivery); the others are COPYed straight into events",
            registry=r,
        )
        self.batch_latency = Histogram(
            "monitor_batch_latency_seconds",
            "Decode + write + offset commit time per batch",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.store_errors = Counter(
            "monitor_store_errors", "Failed write attempts (retried with backoff)", registry=r
        )
        self.dlq_errors = Counter(
            "monitor_dlq_publish_errors",
            "Failed DLQ publish attempts (retried with backoff)",
            registry=r,
        )
        self.alerts_flapping = Gauge(
            "monitor_alerts_flapping",
            "Alerts marked flapping at the last evaluation (their notifications are held)",
            ["rule"],
            registry=r,
        )
        self._flapping_rules: set[str] = set()
        self.consumer_lag = Gauge(
            "monitor_consumer_lag", "High watermark minus position", ["partition"], registry=r
        )
        self.paused = Gauge(
            "monitor_ingest_paused", "1 while ingest is paused waiting for the store", registry=r
        )
        self.since_write = Gauge(
            "monitor_seconds_since_last_write",
            "Seconds since the ingest loop last wrote a batch (see /health)",
            registry=r,
        )
        self.events_conflicting = Counter(
            "monitor_events_conflicting",
            "Duplicate event_ids with a different body, dead-lettered (the first one stays)",
            registry=r,
        )
        self.commit_errors = Counter(
            "monitor_offset_commit_errors", "Offset commits that failed or timed out", registry=r
        )
        self.undecodable_batches = Counter(
            "monitor_undecodable_batches",
            "Record batches the ingest consumer could not decode, by codec (dead-lettered as"
            " undecodable_batch and skipped)",
            ["codec"],
            registry=r,
        )
        self.broker_data_loss = Counter(
            "monitor_broker_data_loss",
            "Partitions found with a log end below the consumer position (broker lost data)",
            registry=r,
        )
        self.http_events = Counter(
            "monitor_http_events", "Events posted to /v1/events", ["result"], registry=r
        )
        self.http_client_errors = Counter(
            "monitor_http_client_errors",
            "4xx answers of the HTTP endpoints by path and status (401, 408, 413, 415, 429...)",
            ["path", "status"],
            registry=r,
        )
        self.gate_answers = Counter(
            "monitor_gate_answers",
            "POST /v1/gate answers: the decision, the error reason, or 'kept' (a decision event "
            "the broker did not acknowledge in time, buffered on disk and replayed later)",
            ["result"],
            registry=r,
        )
        self.gate_degraded = Counter(
            "monitor_gate_degraded_answers",
            "POST /v1/gate answers not made the ordinary way, per policy rule (index) and agent: "
            "kind fail_open / fail_closed (the rule's fail choice decided), deadline (checks past "
            "deadline_ms), llm_timeout / llm_error (on_llm_timeout decided), maps_stale "
            "(answered from maps whose refresh failed)",
            ["rule", "agent", "kind"],
            registry=r,
        )
        self.gate_buffered = Gauge(
            "monitor_gate_buffered_events",
            "Decision events on the gate's disk buffer, not yet acknowledged by the broker",
            registry=r,
        )
        self.gate_buffer_oldest = Gauge(
            "monitor_gate_buffer_oldest_age_seconds",
            "Age of the oldest decision event on the gate's disk buffer (0 when empty)",
            registry=r,
        )
        self.gate_dropped = Gauge(
            "monitor_gate_decision_events_dropped",
            "Decision events lost since the worker started, by reason (full: buffer size cap; "
            "corrupt: unreadable segment tail; write_error: the disk refused; refused: the "
            "broker refused the record for good)",
            ["reason"],
            registry=r,
        )
        self.otlp_spans = Counter(
            "monitor_otlp_spans",
            "Spans posted to /v1/traces by fate (mapped, dropped, rejected, waiting: parked "
            "until their trace's root; events: events made; on the traces topic, bad_record "
            "and bad_batch: records and record batches skipped as undecodable)",
            ["result"],
            registry=r,
        )
        self.otlp_failures = Counter(
            "monitor_otlp_failures",
            "Failed operations seen in mapped spans, by kind (llm_call, tool, agent)",
            ["kind"],
            registry=r,
        )
        self.otlp_traces = Counter(
            "monitor_otlp_traces",
            "Traces mapped, by how they were resolved (root: with their root; late: spans after "
            "their root; deadline / overflow: under the fallback, the trace id as conversation)",
            ["how"],
            registry=r,
        )
        self.evaluations_exported = Counter(
            "monitor_evaluations_exported",
            "Judge verdicts sent as gen_ai.evaluation.result events, by result (ok, failed)",
            ["result"],
            registry=r,
        )
        self.otlp_pending_spans = Gauge(
            "monitor_otlp_pending_spans",
            "Spans waiting in Postgres for their trace's root",
            registry=r,
        )
        # judging
        self.judge_requests = Counter(
            "monitor_judge_requests", "Conversations sent to the judges", registry=r
        )
        self.judged = Counter(
            "monitor_judged_conversations", "Judge requests completed", registry=r
        )
        self.judge_requests_resent = Counter(
            "monitor_judge_requests_resent",
            "Judge requests published again: no verdicts long after they were sent (lost on the "
            "topic or never finished)",
            registry=r,
        )
        self.judge_requests_skipped = Counter(
            "monitor_judge_requests_skipped",
            "Judge request records (malformed) and record batches (undecodable_batch) the judge "
            "consumer skipped",
            ["reason"],
            registry=r,
        )
        self.verdicts = Counter(
            "monitor_verdicts", "Verdicts produced", ["judge", "status"], registry=r
        )
        self.judge_latency = Histogram(
            "monitor_judge_latency_seconds",
            "Time to judge one conversation with every judge",
            buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=r,
        )
        # the event loop
        self.event_loop_stall = Gauge(
            "monitor_event_loop_stall_seconds",
            "Longest event-loop stall in the last minute: how late a 50 ms wake-up came",
            registry=r,
        )
        self.event_loop_lag = Histogram(
            "monitor_event_loop_lag_seconds",
            "How late each 50 ms wake-up of the event-loop probe came (the loop held that long)",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )

        self.retention_runs = Counter(
            "monitor_retention_runs",
            "Retention runs by result (ok, partial: a step failed, skipped: another worker ran it)",
            ["result"],
            registry=r,
        )
        self.retention_partitions = Counter(
            "monitor_retention_partitions",
            "Daily events partitions by action (created, dropped; emptied: a day's leaf of "
            "unsampled events truncated)",
            ["action"],
            registry=r,
        )
        self.retention_rows = Counter(
            "monitor_retention_rows_deleted",
            "Rows deleted by retention, per kind",
            ["kind"],
            registry=r,
        )
        self.retention_last_ok = Gauge(
            "monitor_retention_last_success_timestamp_seconds",
            "Unix time of the last retention run with no failed step",
            registry=r,
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

    def otlp(self, failures: dict[str, int], traces: dict[str, int]) -> None:
        """Count the failures and trace resolutions of one mapped request or sweep."""
        for kind, n in failures.items():
            self.otlp_failures.labels(kind).inc(n)
        for how, n in traces.items():
            self.otlp_traces.labels(how).inc(n)

    def set_gate_outbox(self, status: dict[str, Any]) -> None:
        """The gate's buffer gauges from :meth:`DecisionOutbox.status` (set at scrape time)."""
        self.gate_buffered.set(status["buffered"])
        self.gate_buffer_oldest.set(status["oldest_age_s"] or 0.0)
        for reason in ("full", "corrupt", "write_error", "refused"):
            self.gate_dropped.labels(reason).set(status["dropped_by_reason"].get(reason, 0))

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

    def render(self) -> bytes:
        """The text exposition format of every metric."""
        return generate_latest(self.registry)
