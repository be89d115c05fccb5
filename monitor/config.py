"""Settings: the only module that reads the environment.

Every setting has an environment variable ``MONITOR_<NAME>`` (case-insensitive); the database
URL also honours the conventional ``DATABASE_URL``. :func:`load_settings` also reads a dotenv
file (:func:`env_file`: ``./.env`` unless ``MONITOR_ENV_FILE`` names another, or is empty for
none) under the environment: a variable set in both is taken from the environment.
:func:`setting_sources` says where each value came from. Unset ``kafka_bootstrap`` /
``database_url`` mean "embedded": ``monitor up`` then starts the Tansu broker and an embedded
Postgres under ``state_dir``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from dotenv import dotenv_values
from pydantic import AliasChoices, Field, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from monitor.core.errors import ConfigError
from monitor.core.fields import non_negative, positive, secret, secret_field, unset
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
        "Kafka bootstrap servers, host:port[,host:port]. Unset: embedded (`monitor up` starts "
        "the Tansu broker)."
    )
    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("MONITOR_DATABASE_URL", "DATABASE_URL"),
        description="Postgres URL, postgresql://user:pass@host:port/db (also read from "
        "DATABASE_URL). Unset: embedded (`monitor up` starts a private Postgres under state_dir).",
    )
    database_read_url: str | None = unset(
        "Postgres URL of a streaming replica for reads only: the analytics commands "
        "(calibration, escalation, thresholds, passk, judges, gate, drift --no-store, alerts "
        "list/silences/backtest) and `monitor report` read there and show its replay lag; "
        "writes (fits, drift accept, silences, acks, keys) stay on database_url. Unset: they "
        "read database_url. Compose: `docker compose --profile replica`."
    )
    state_dir: Path = Field(
        default=Path(".monitor"),
        description="Directory of the embedded broker's and Postgres's data, the worker's state "
        "and the logs `monitor up` writes.",
    )
    kafka_idempotent: bool = Field(
        default=True,
        description="Idempotent producer (acks=all). The embedded Tansu broker needs false "
        "(its memory store lacks InitProducerId); `monitor up` sets it.",
    )

    # --- topics ---------------------------------------------------------------------------
    topic_events: str = Field(
        default="agent-events",
        description="Kafka topic of the agent-event/v1 events: the SDK and the HTTP ingest "
        "publish to it, the worker consumes it.",
    )
    topic_dlq: str = Field(
        default="agent-events.dlq",
        description="Dead-letter topic: every invalid event, with a machine-readable reason and "
        "its original bytes.",
    )
    topic_partitions: int = Field(
        default=4,
        ge=1,
        description="Partitions of the topics the monitor creates (ingest workers beyond this "
        "count idle).",
    )
    consumer_group: str = Field(
        default="monitor-ingest",
        description="Kafka consumer group of the ingest loop (workers sharing it split the "
        "partitions).",
    )
    app_id: str = Field(
        default="agent-monitor",
        description="The worker's faust application id (names its consumer group and local "
        "state under state_dir).",
    )

    # --- ingest ---------------------------------------------------------------------------
    batch_max_events: int = Field(default=5000, ge=1, description="Most events per write batch.")
    batch_max_wait_ms: int = Field(
        default=200, ge=1, description="Longest wait to fill a write batch, in milliseconds."
    )
    fetch_max_wait_ms: int = Field(
        default=100,
        ge=1,
        description="Longest the broker may hold the ingest consumer's fetch, in milliseconds "
        "(Kafka's fetch.max.wait.ms, 500 there): Tansu sometimes holds a fetch this long while a "
        "partition in it still has records, which stalls draining a backlog.",
    )
    writes_in_flight: int = Field(
        default=2,
        ge=1,
        le=8,
        description="Batches written at once, one Postgres connection each; offsets are still "
        "committed in batch order (1: one write at a time).",
    )
    store_retry_initial_s: float = positive(
        0.5,
        "First wait, in seconds, before a batch write is retried while Postgres is down (the "
        "partitions paused); it doubles up to store_retry_max_s.",
    )
    store_retry_max_s: float = positive(
        10.0, "Longest wait, in seconds, between retries of a batch write while Postgres is down."
    )
    max_future_skew_s: float = non_negative(
        300.0,
        "Events whose ts is further than this (seconds) ahead of the receiver's clock are "
        "rejected (reason future_timestamp) over HTTP and dead-lettered by the worker.",
    )
    health_stall_s: float = positive(
        120.0,
        "/health answers 503 (stalled) when no batch was written for this long (seconds) "
        "while the consumer lag is above zero or the partitions are paused.",
    )
    commit_timeout_s: float = positive(15.0, "Longest wait for one offset commit, in seconds.")

    # --- web ------------------------------------------------------------------------------
    web_host: str = Field(
        default="127.0.0.1",
        description="Address of the worker's web server (POST /v1/events and /v1/traces, GET "
        "/v1/calibration, /metrics, /health).",
    )
    web_port: int = Field(
        default=6066, ge=0, le=65535, description="Port of the worker's web server."
    )
    ingest_token: str | None = secret(
        "Shared bearer token of POST /v1/events and POST /v1/traces, for every agent "
        "(development mode). Unset: only API keys with the write scope (`monitor keys issue`)."
    )
    http_max_body_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description="Largest POST /v1/events or /v1/traces body in bytes, raw or inflated (413 "
        "above; 8 MiB).",
    )
    http_max_events: int = Field(
        default=10_000,
        ge=1,
        description="Most events in one POST /v1/events body, and spans in one POST /v1/traces "
        "request (413 above).",
    )
    otlp_grpc_port: int = Field(
        default=4317,
        ge=0,
        le=65535,
        description="Port of the OTLP/gRPC receiver (traces and logs, docs/otel.md) on web_host; "
        "0: no gRPC receiver.",
    )

    # --- OpenTelemetry ingest (POST /v1/traces; docs/otel.md) ------------------------------
    otel_confidence_attributes: str = Field(
        default="monitor.confidence,confidence",
        description="Comma-separated span attributes holding the confidence in [0, 1] (first "
        "present wins); no semantic convention defines one (docs/otel.md).",
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
        "How long, in seconds, spans wait in Postgres for their trace's root before they are "
        "mapped under the fallback (the trace id as the conversation).",
    )
    otel_pending_max_spans: int = Field(
        default=100_000,
        ge=1,
        description="At most this many spans wait for their root; beyond, the traces waiting "
        "longest are mapped under the fallback first.",
    )
    otel_trace_memory_seconds: float = positive(
        3600.0,
        "How long, in seconds, a mapped trace's conversation and agent are remembered for spans "
        "arriving after their root.",
    )
    otel_witness_wait_seconds: float = positive(
        30.0,
        "How long, in seconds, a trace with its root but no LLM span waits for LLM spans "
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
    otel_evaluations_headers: str = secret_field(
        default="",
        description="Headers of the evaluations export, 'key=value' pairs separated by commas "
        "(values URL-encoded, as OTEL_EXPORTER_OTLP_HEADERS).",
    )
    otel_sweep_seconds: float = positive(
        5.0,
        "Seconds between the worker's mappings of the traces past the deadline or count bound.",
    )

    # --- credentials (monitor.auth; docs/robustness.md "Threat model") ---------------------
    gate_origin_key: str | None = secret_field(
        default=None,
        description="Secret that tags the gate's decision events so the ingest accepts their "
        "reserved 'gate:' ids from the gate only. Unset: a random key kept in "
        "state_dir/gate-origin.key (workers sharing a topic must set the same value).",
    )
    gc_interval_s: float = positive(
        60.0,
        "Seconds between the full garbage collections of the worker and the gate process "
        "(monitor/core/gc_tuning.py: the database clients leave cyclic garbage that only a full "
        "collection frees; each pause is tens of milliseconds).",
    )
    keys_refresh_s: float = positive(
        30.0,
        "Seconds between the worker's reloads of the API keys "
        "from Postgres (a revoked key is refused at most this long after `monitor keys revoke`).",
    )
    keys_miss_refresh_s: float = positive(
        2.0,
        "Shortest interval, in seconds, between reloads of the API keys "
        "caused by an unknown key (a key issued since the last reload).",
    )

    # --- analytics ------------------------------------------------------------------------
    sampling_file: Path | None = unset(
        "YAML sampling policy (strata, rates, always-sample rules). Unset: sample "
        "every conversation (rate 1.0)."
    )
    api_token: str | None = secret(
        "Shared bearer token of the read API (GET /v1/calibration/...). Unset: only API keys "
        "with the read scope."
    )

    drift_interval_s: float = positive(300.0, "Seconds between the worker's drift checks.")
    drift_recent_s: float = Field(
        default=3600.0,
        ge=60,
        description="Recent window of the periodic drift checks, in seconds; "
        "compared with the segment's pinned reference (drift_reference_s).",
    )
    drift_reference_s: float = Field(
        default=86400.0,
        ge=60,
        description="Length of each segment's pinned drift reference, in seconds: "
        "earlier unflagged traffic, frozen while a change is flagged.",
    )
    drift_alpha: float = Field(
        default=0.001,
        gt=0,
        lt=0.5,
        description="Family-wise level of each drift check (Holm across its tests).",
    )
    drift_min_samples: int = Field(
        default=100,
        ge=1,
        description="Effective items the smaller window of a drift test needs before the test "
        "may fire (PSI and ECE need at least 200 whatever this says).",
    )
    drift_min_reference: float = non_negative(
        1000.0,
        "Effective items a segment's drift reference needs before its checks may "
        "fire (all checks share the reference's sampling error).",
    )

    # --- judging --------------------------------------------------------------------------
    judge_enabled: bool = Field(default=True, description="Run the judge scheduler and workers.")
    topic_judge_requests: str = Field(
        default="judge-requests",
        description="Kafka topic of judge requests (sampled conversations due for judging).",
    )
    judge_consumer_group: str = Field(
        default="monitor-judges", description="Kafka consumer group of the judge workers."
    )
    judge_idle_s: float = non_negative(
        30.0,
        "Judge a conversation once its latest event's timestamp is this many seconds old "
        "(event time), and judge_arrival_idle_s holds too.",
    )
    judge_arrival_idle_s: float = non_negative(
        30.0,
        "Judge a conversation once none of its events arrived (was stored) for this many "
        "seconds, by the store's clock: a replay or backfill of old events is not judged while "
        "it is still arriving.",
    )
    judge_rejudge_most: int = non_negative(
        5,
        "How many times a judged conversation that stored more events since is judged again "
        "once idle (its verdicts replaced by the new ones); 0: judged once.",
    )
    judge_rejudge_gap_s: float = non_negative(
        60.0, "Least time, in seconds, between two judgements of one conversation."
    )
    judge_schedule_interval_s: float = positive(
        5.0, "Seconds between the judge scheduler's passes over idle sampled conversations."
    )
    judge_batch: int = Field(default=200, ge=1, description="Most conversations per schedule.")
    judge_concurrency: int = Field(default=8, ge=1, description="Conversations judged at once.")
    llm_judge_base_url: str | None = unset(
        "OpenAI-compatible endpoint (e.g. https://api.openai.com/v1, a vLLM or "
        "Ollama server's /v1); also the gate's inline llm check. Unset: only the deterministic "
        "judges run."
    )
    llm_judge_model: str = Field(
        default="gpt-4o-mini", description="Model name the LLM judge asks its endpoint for."
    )
    llm_judge_api_key: str | None = secret(
        "API key of the LLM judge's endpoint (sent as Authorization: Bearer). Unset: no "
        "header (Ollama)."
    )
    llm_judge_timeout_s: float = positive(
        60.0,
        "Timeout of one LLM judge request, in seconds (the gate's inline llm check has its own, "
        "per policy rule).",
    )
    llm_judge_json_mode: bool = Field(
        default=True,
        description="Ask the endpoint for JSON (response_format json_object); turn off for "
        "servers that refuse it.",
    )
    domains_dir: Path | None = unset(
        "Directory of domain references: one sub-directory per domain (the "
        "conversation's context.domain) holding .md/.txt reference texts. Adds to the domains "
        "registered through the monitor.domains entry points."
    )
    judge_precision_floor: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="A judge labels the items of an agent x domain only when the lower end of "
        "the 95 % Wilson interval of its precision against ground truth (a share, 0-1) is at "
        "least this.",
    )
    judge_floor_min_pairs: int = Field(
        default=30,
        ge=1,
        description="Flagged conversations with an outcome an agent x domain needs before its "
        "own precision interval decides whether a judge labels it; below, the judge's pooled "
        "interval over every scope decides.",
    )
    judge_max_events: int = Field(
        default=2000,
        ge=2,
        description="Most events judged per conversation: a longer one is judged on its first "
        "and last judge_max_events / 2 events, the others summarised (counts, time span, tool "
        "results by tool); every verdict on it states the cap (evidence.truncated).",
    )
    judge_time_budget_s: float = positive(
        30.0,
        "Judging time budget per conversation, in seconds: no judge starts after it (each one "
        "left gets an error verdict). Judging runs in a worker thread, off the event loop.",
    )
    judge_resend_after_s: float = Field(
        default=3600.0,
        ge=60,
        description="A judge request with no verdicts this long (seconds) after it was sent "
        "(lost on the topic, or its judging never finished) is published again.",
    )
    judge_resend_most: int = non_negative(2, "How many times one judge request is published again.")
    judge_quality_interval_s: float = positive(
        300.0, "Seconds between the worker's re-measurements of the judges' precision."
    )

    # --- alerting -------------------------------------------------------------------------
    alerting_enabled: bool = Field(
        default=True, description="Evaluate alert rules and deliver notifications in the worker."
    )
    alert_rules_file: Path | None = unset("YAML alert rules. Unset: the bundled default rule set.")
    alert_exemplars: int = non_negative(
        3,
        "Conversations stored per alert that fires as its exemplars (picked by the rule of "
        "its signal, docs/runbooks.md) and promoted into the kept sample; 0: none.",
    )
    slack_bot_token: str | None = secret(
        "Slack bot token (xoxb-...) for chat.postMessage (with slack_channel; resolutions are "
        "threaded under their alert)."
    )
    slack_channel: str | None = unset("Channel id or name the bot posts to (with slack_bot_token).")
    slack_webhook_url: str | None = secret(
        "Slack incoming webhook URL (used when no bot token is set; no threading)."
    )
    slack_api_url: str = Field(
        default="https://slack.com/api/", description="Slack Web API base URL."
    )
    webhook_url: str | None = secret(
        "Generic webhook receiver URL: each notification is POSTed as JSON with an "
        "Idempotency-Key header (a URL may carry a token, so it is masked)."
    )
    webhook_secret: str | None = secret(
        "HMAC-SHA256 key signing the generic webhook's body (X-Monitor-Signature header)."
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
        "How long, in seconds, a claimed notification is reserved; a crashed notifier's claim "
        "is retried after it (at most one duplicate, same idempotency key).",
    )

    # --- grafana (monitor dashboards push) ---------------------------------------------------
    grafana_url: str = Field(
        default="http://localhost:3000",
        description="Base URL of the Grafana that `monitor dashboards push` uploads to.",
    )
    grafana_token: str | None = secret(
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


#: the environment variable naming the dotenv file the settings are also read from
ENV_FILE_VARIABLE = "MONITOR_ENV_FILE"
DEFAULT_ENV_FILE = ".env"

Source = Literal["default", "environment", "env file"]


def env_file() -> Path | None:
    """The dotenv file :func:`load_settings` reads under the environment: the one
    ``MONITOR_ENV_FILE`` names (empty: none), else ``.env`` in the current directory. A file
    that does not exist is read as empty."""
    name = os.environ.get(ENV_FILE_VARIABLE, DEFAULT_ENV_FILE)
    return Path(name) if name else None


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment and :func:`env_file` (the environment winning),
    with explicit overrides winning over both."""
    return Settings(_env_file=env_file(), **overrides)  # type: ignore[arg-type]


def env_names(name: str, field: FieldInfo) -> tuple[str, ...]:
    """The environment variables setting ``name`` is read from, the first one set winning:
    ``MONITOR_<NAME>``, or its aliases (``database_url``: MONITOR_DATABASE_URL, DATABASE_URL)."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return tuple(str(choice) for choice in alias.choices)
    return (f"{Settings.model_config.get('env_prefix', '')}{name}".upper(),)


def setting_sources(path: Path | None) -> dict[str, tuple[Source, str | None]]:
    """Where each setting of :class:`Settings` comes from when read with dotenv file ``path``:
    ``("environment", VARIABLE)``, ``("env file", VARIABLE)`` or ``("default", None)``, by the
    precedence :func:`load_settings` applies (names compared case-insensitively)."""
    environ = {key.upper() for key in os.environ}
    dotenv: set[str] = set()
    if path is not None and path.is_file():
        dotenv = {key.upper() for key, value in dotenv_values(path).items() if value is not None}
    sources: dict[str, tuple[Source, str | None]] = {}
    for name, field in Settings.model_fields.items():
        names = env_names(name, field)
        from_env = [var for var in names if var in environ]
        from_file = [var for var in names if var in dotenv]
        if from_env:
            sources[name] = ("environment", from_env[0])
        elif from_file:
            sources[name] = ("env file", from_file[0])
        else:
            sources[name] = ("default", None)
    return sources


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
