"""Settings: the only module that reads the environment.

Every setting has an environment variable ``MONITOR_<NAME>`` (case-insensitive); the database
URL also honours the conventional ``DATABASE_URL``. Unset ``kafka_bootstrap`` / ``database_url``
mean "embedded": ``monitor up`` then starts the Tansu broker and an embedded Postgres under
``state_dir``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from monitor.core.errors import ConfigError
from monitor.core.fields import non_negative, positive, unset
from monitor.core.gate_settings import GateSettings
from monitor.core.http_settings import HttpSettings
from monitor.core.retention_settings import RetentionSettings
from monitor.sampling.rules import SamplingPolicy


class Settings(BaseSettings, RetentionSettings, GateSettings, HttpSettings):
    """All runtime configuration, validated at startup (errors name the field); the retention
    settings are declared in :class:`RetentionSettings`, the gate's in :class:`GateSettings`,
    the web server's timeouts and rates in :class:`HttpSettings`."""

    model_config = SettingsConfigDict(env_prefix="MONITOR_", extra="ignore")

    # --- infrastructure -------------------------------------------------------------------
    kafka_bootstrap: str | None = unset(
        "Kafka bootstrap servers, host:port[,host:port]. Unset: embedded."
    )
    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("MONITOR_DATABASE_URL", "DATABASE_URL"),
        description="Postgres URL (postgresql://user@host:port/db). Unset: embedded.",
    )
    database_read_url: str | None = unset(
        "Postgres URL of a streaming replica for reads only: the analytics "
        "commands and `monitor report` read there (and say how far it is behind the primary). "
        "Unset: they read database_url. Writes always go to database_url."
    )
    state_dir: Path = Field(default=Path(".monitor"), description="Embedded data directory.")
    kafka_idempotent: bool = Field(
        default=True,
        description="Idempotent producer (acks=all). Tansu's memory store lacks InitProducerId, "
        "so the embedded stack turns this off.",
    )

    # --- topics ---------------------------------------------------------------------------
    topic_events: str = "agent-events"
    topic_dlq: str = "agent-events.dlq"
    topic_partitions: int = Field(default=4, ge=1)
    consumer_group: str = "monitor-ingest"
    app_id: str = "agent-monitor"

    # --- ingest ---------------------------------------------------------------------------
    batch_max_events: int = Field(default=5000, ge=1, description="Most events per write batch.")
    batch_max_wait_ms: int = Field(default=200, ge=1, description="Longest wait to fill a batch.")
    fetch_max_wait_ms: int = Field(
        default=100,
        ge=1,
        description="Longest the broker may hold the ingest consumer's fetch (Kafka's "
        "fetch.max.wait.ms, 500 there): Tansu sometimes holds a fetch this long while a "
        "partition in it still has records, which stalls draining a backlog.",
    )
    writes_in_flight: int = Field(
        default=2, ge=1, le=8, description="Batches written at once (offsets commit in order)."
    )
    store_retry_initial_s: float = Field(default=0.5, gt=0)
    store_retry_max_s: float = Field(default=10.0, gt=0)
    max_future_skew_s: float = non_negative(
        300.0,
        "Events whose ts is further than this ahead of the receiver's clock are "
        "rejected (reason future_timestamp) over HTTP and dead-lettered by the worker.",
    )
    health_stall_s: float = positive(
        120.0,
        "/health answers 503 (stalled) when no batch was written for this long "
        "while the consumer lag is above zero or the partitions are paused.",
    )
    commit_timeout_s: float = positive(15.0, "Longest wait for one offset commit.")

    # --- web ------------------------------------------------------------------------------
    web_host: str = "127.0.0.1"
    web_port: int = Field(default=6066, ge=0, le=65535)
    ingest_token: str | None = unset(
        "Bearer token required by POST /v1/events. Unset: HTTP ingest off."
    )
    otlp_grpc_port: int = Field(
        default=4317,
        ge=0,
        le=65535,
        description="Port of the OTLP/gRPC receiver (traces and logs, docs/otel.md) on web_host; "
        "0: no gRPC receiver.",
    )
    http_max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    http_max_events: int = Field(default=10_000, ge=1)

    # --- OpenTelemetry ingest (POST /v1/traces; docs/otel.md) ------------------------------
    otel_confidence_attributes: str = Field(
        default="monitor.confidence,confidence",
        description="Comma-separated span attributes holding the confidence in [0, 1] (first "
        "present wins); no semantic convention defines one.",
    )
    otel_escalation_tools: str = Field(
        default="transfer_to_human_agents,escalate*",
        description="Comma-separated tool-name patterns (fnmatch) whose call is an escalation.",
    )
    topic_traces: str | None = unset(
        "Kafka topic of OTLP protobuf trace requests (e.g. agent-traces, written by "
        "the Collector's kafka exporter) the worker also consumes. Unset: off."
    )
    otel_escalation_attributes: str = Field(
        default="monitor.escalation",
        description="Comma-separated span attributes whose truthy value marks an escalation "
        "(a string value is the reason; '<first>.trigger' names the trigger).",
    )
    otel_pending_seconds: float = positive(
        600.0,
        "How long spans wait in Postgres for their trace's root before they are "
        "mapped under the fallback (the trace id as the conversation).",
    )
    otel_pending_max_spans: int = Field(
        default=100_000,
        ge=1,
        description="At most this many spans wait; beyond, the traces waiting longest are "
        "mapped under the fallback first.",
    )
    otel_trace_memory_seconds: float = positive(
        3600.0,
        "How long a mapped trace's conversation and agent are remembered for spans "
        "arriving after their root.",
    )
    otel_witness_wait_seconds: float = positive(
        30.0,
        "How long a trace with its root but no LLM span waits for LLM spans "
        "overtaken by the root before its agent span is taken as the only witness.",
    )
    otel_content_wait_seconds: float = non_negative(
        5.0,
        "How long (s) a trace with its root waits for the GenAI log records (POST /v1/logs) "
        "of LLM spans that carry no content before it is mapped without them; 0: never waits "
        "(content in log records is then used only when the records come first).",
    )
    otel_evaluations_endpoint: str | None = unset(
        "OTLP/HTTP logs URL (e.g. http://collector:4318/v1/logs) that receives "
        "every judge verdict as a gen_ai.evaluation.result event; unset: not exported."
    )
    otel_evaluations_headers: str = Field(
        default="",
        description="Headers of the evaluations export, 'key=value' pairs separated by commas "
        "(values URL-encoded, as OTEL_EXPORTER_OTLP_HEADERS).",
    )
    otel_sweep_seconds: float = positive(
        5.0, "How often the worker maps the traces past the deadline or count bound."
    )

    # --- credentials (monitor.auth; docs/robustness.md "Threat model") ---------------------
    gate_origin_key: str | None = Field(
        default=None,
        repr=False,
        description="Secret that tags the gate's decision events so the ingest accepts their "
        "reserved 'gate:' ids from the gate only. Unset: a random key kept in "
        "state_dir/gate-origin.key (workers sharing a topic must set the same value).",
    )
    keys_refresh_s: float = positive(
        30.0,
        "Seconds between the worker's reloads of the API keys "
        "from Postgres (a revoked key is refused at most this long after `monitor keys revoke`).",
    )
    keys_miss_refresh_s: float = positive(
        2.0,
        "Shortest interval between reloads of the API keys "
        "caused by an unknown key (a key issued since the last reload).",
    )

    # --- analytics ------------------------------------------------------------------------
    sampling_file: Path | None = unset(
        "YAML sampling policy (strata, rates, always-sample rules). Unset: sample "
        "every conversation (rate 1.0)."
    )
    api_token: str | None = unset(
        "Bearer token for the read API (GET /v1/calibration/...). Unset: open."
    )

    drift_interval_s: float = positive(300.0, "Seconds between the worker's drift checks.")
    drift_recent_s: float = Field(
        default=3600.0,
        ge=60,
        description="Recent window of the periodic drift checks (s); "
        "compared with the segment's pinned reference (drift_reference_s).",
    )
    drift_reference_s: float = Field(
        default=86400.0,
        ge=60,
        description="Length of each segment's drift reference (s): "
        "earlier unflagged traffic, frozen while a change is flagged.",
    )
    drift_alpha: float = Field(
        default=0.001,
        gt=0,
        lt=0.5,
        description="Family-wise level of each drift check (Holm across its tests).",
    )
    drift_min_samples: int = Field(default=100, ge=1)
    drift_min_reference: float = non_negative(
        1000.0,
        "Effective items a segment's drift reference needs before its checks may "
        "fire (all checks share the reference's sampling error).",
    )

    # --- judging --------------------------------------------------------------------------
    judge_enabled: bool = Field(default=True, description="Run the judge scheduler and workers.")
    topic_judge_requests: str = "judge-requests"
    judge_consumer_group: str = "monitor-judges"
    judge_idle_s: float = non_negative(
        30.0, "Judge a conversation once it had no event for this long."
    )
    judge_schedule_interval_s: float = Field(default=5.0, gt=0)
    judge_batch: int = Field(default=200, ge=1, description="Most conversations per schedule.")
    judge_concurrency: int = Field(default=8, ge=1, description="Conversations judged at once.")
    llm_judge_base_url: str | None = unset(
        "OpenAI-compatible endpoint (e.g. https://api.openai.com/v1, a vLLM or "
        "Ollama server's /v1). Unset: only the deterministic judges run."
    )
    llm_judge_model: str = "gpt-4o-mini"
    llm_judge_api_key: str | None = Field(default=None, repr=False)
    llm_judge_timeout_s: float = Field(default=60.0, gt=0)
    llm_judge_json_mode: bool = True
    domains_dir: Path | None = unset(
        "Directory of domain references: one sub-directory per domain (the "
        "conversation's context.domain) holding .md/.txt reference texts. Adds to the domains "
        "registered through the monitor.domains entry points."
    )
    judge_precision_floor: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="A judge whose precision against ground truth is below this (measured on "
        "at least judge_floor_min_pairs flagged conversations) stops labelling items.",
    )
    judge_floor_min_pairs: int = Field(default=30, ge=1)
    judge_max_events: int = Field(
        default=2000,
        ge=2,
        description="Most events judged per conversation: a longer one is judged on its first "
        "and last judge_max_events / 2 events, the others summarised (counts, time span, tool "
        "results by tool); every verdict on it states the cap (evidence.truncated).",
    )
    judge_time_budget_s: float = positive(
        30.0,
        "Judging time budget per conversation: no judge starts after it (each one "
        "left gets an error verdict). Judging runs in a worker thread, off the event loop.",
    )
    judge_resend_after_s: float = Field(
        default=3600.0,
        ge=60,
        description="A judge request with no verdicts this long after it was sent (lost on "
        "the topic, or its judging never finished) is published again.",
    )
    judge_resend_most: int = non_negative(2, "How many times one judge request is published again.")
    judge_quality_interval_s: float = positive(
        300.0, "How often the worker re-measures the judges."
    )

    # --- alerting -------------------------------------------------------------------------
    alerting_enabled: bool = Field(
        default=True, description="Evaluate alert rules and deliver notifications in the worker."
    )
    alert_rules_file: Path | None = unset("YAML alert rules. Unset: the bundled default rule set.")
    slack_bot_token: str | None = Field(
        default=None, repr=False, description="Slack bot token (xoxb-...) for chat.postMessage."
    )
    slack_channel: str | None = unset("Channel id or name the bot posts to (with slack_bot_token).")
    slack_webhook_url: str | None = Field(
        default=None,
        repr=False,
        description="Slack incoming webhook URL (used when no bot token is set; no threading).",
    )
    slack_api_url: str = Field(
        default="https://slack.com/api/", description="Slack Web API base URL."
    )
    webhook_url: str | None = unset("Generic webhook receiver URL.")
    webhook_secret: str | None = Field(
        default=None, repr=False, description="HMAC-SHA256 key of the X-Monitor-Signature header."
    )
    alertmanager_url: str | None = unset("Alertmanager base URL (alerts go to /api/v2/alerts).")
    dashboard_url: str = Field(
        default="http://localhost:3000", description="Grafana base URL for links in alerts."
    )
    notify_max_attempts: int = Field(
        default=30, ge=1, description="Delivery attempts per notification and sink."
    )
    notify_lease_s: float = positive(
        60.0,
        "How long a claimed notification is reserved; a crashed notifier's claim "
        "is retried after it (at most one duplicate, same idempotency key).",
    )

    # --- grafana (monitor dashboards push) ---------------------------------------------------
    grafana_url: str = Field(
        default="http://localhost:3000",
        description="Base URL of the Grafana that `monitor dashboards push` uploads to.",
    )
    grafana_token: str | None = unset(
        "Grafana service-account token (Editor role) for `monitor dashboards push`."
    )
    grafana_folder: str = Field(
        default="Agent monitor", description="Grafana folder the dashboards are pushed into."
    )

    @field_validator("database_url", "database_read_url")
    @classmethod
    def _async_driver(cls, value: str | None) -> str | None:
        return normalize_db_url(value) if value else None

    @property
    def reads_url(self) -> str | None:
        """Where reads that may lag the primary go: ``database_read_url``, else
        ``database_url``."""
        return self.database_read_url or self.database_url


def normalize_db_url(url: str) -> str:
    """Return ``url`` with the SQLAlchemy asyncpg driver (accepts postgres://, postgresql://)."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ValueError(f"database_url must be a postgresql:// URL, got {url.split('://')[0]}://")


def child_environment(
    overrides: Mapping[str, str] | None = None, defaults: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment for a child process this one starts (worker, broker): this process's
    environment with ``defaults`` under it and ``overrides`` over it. The only place besides
    :class:`Settings` that reads the environment (passing it on, not interpreting it)."""
    return {**(defaults or {}), **os.environ, **(overrides or {})}


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment, with explicit overrides winning."""
    return Settings(**overrides)  # type: ignore[arg-type]


def load_sampling_policy(settings: Settings) -> SamplingPolicy:
    """The policy in ``settings.sampling_file`` (YAML), or the default policy (sample all).

    Raises ConfigError naming the file (and the field) when it cannot be read or is invalid.
    """
    path = settings.sampling_file
    if path is None:
        return SamplingPolicy()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the sampling policy: {exc.strerror}") from None
    return SamplingPolicy.from_yaml(text, str(path))
