"""Tables of the OTLP trace assembly, on the shared metadata (``monitor.otel.pending``).

``otel_pending_spans``
    Spans received before their trace's root: one row per (trace, span), the span as JSON,
    kept until the root arrives (then mapped with its trace and deleted) or until the deadline
    or the count bound (then mapped under the fallback and deleted). ``scope``: the agent
    patterns of the API key that sent the span (NULL: a credential for every agent, or the
    traces topic); a trace's events are mapped only for agents every such scope allows.
``otel_traces``
    One row per trace already mapped: the conversation and agent it named, whether it had LLM
    calls, and how it was resolved (``root``, ``late``, ``deadline``, ``overflow``), so spans
    arriving after their root are mapped with that context. Rows older than the memory window
    are deleted.
``otel_pending_records``
    GenAI event log records (``POST /v1/logs``) whose trace is not mapped yet: one row per
    (trace, span, record digest), the record as JSON and the scope of the key that sent it.
    Used and deleted when the trace is mapped (their span takes the content it lacks), or
    deleted once older than the deadline (their spans never came).
"""

from __future__ import annotations

from sqlalchemy import ARRAY, Boolean, Column, Index, PrimaryKeyConstraint, Table, Text

from monitor.store.tables import inserted_at, key, metadata, required

otel_pending_spans = Table(
    "otel_pending_spans",
    metadata,
    required("trace_id", Text),
    required("span_id", Text),
    inserted_at("received_at"),
    required("root", Boolean, server_default="false"),
    required("span", Text),
    Column("scope", ARRAY(Text)),
    PrimaryKeyConstraint("trace_id", "span_id", name="otel_pending_spans_pkey"),
    Index("otel_pending_spans_received_at", "received_at"),
)

otel_traces = Table(
    "otel_traces",
    metadata,
    key("trace_id", Text),
    Column("conversation_id", Text),
    Column("agent_id", Text),
    required("llm_calls", Boolean, server_default="false"),
    required("how", Text),
    inserted_at("resolved_at"),
    Index("otel_traces_resolved_at", "resolved_at"),
)

otel_pending_records = Table(
    "otel_pending_records",
    metadata,
    required("trace_id", Text),
    required("span_id", Text),
    required("record_key", Text),
    inserted_at("received_at"),
    required("record", Text),
    Column("scope", ARRAY(Text)),
    PrimaryKeyConstraint("trace_id", "span_id", "record_key", name="otel_pending_records_pkey"),
    Index("otel_pending_records_received_at", "received_at"),
)
