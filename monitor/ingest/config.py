"""What the ingest loop is configured with (a plain value built from :class:`Settings` by the
worker; its own module so that the loop's helpers can take it without importing the loop)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class IngestConfig:
    bootstrap: str
    topic: str = "agent-events"
    dlq_topic: str = "agent-events.dlq"
    group_id: str = "monitor-ingest"
    batch_max_events: int = 5000
    batch_max_wait_ms: int = 200
    fetch_max_wait_ms: int = 100  # the consumer's fetch.max.wait.ms (Settings.fetch_max_wait_ms)
    retry_initial_s: float = 0.5
    retry_max_s: float = 10.0
    idempotent_producer: bool = True
    max_future_skew_s: float | None = 300.0
    stall_after_s: float = 120.0
    commit_timeout_s: float = 15.0
    writes_in_flight: int = 2  # batches written at once (offsets still committed in order)
    origin_key: bytes | None = None  # the gate decision events' (monitor.contract.origin)

    def consumer_settings(self) -> dict[str, Any]:
        """The ingest consumer's aiokafka settings besides its servers and group: manual
        commits, the earliest offset when the group has none, ``batch_max_events`` per poll,
        large fetches, and the broker's hold of a fetch bounded by ``fetch_max_wait_ms``. The
        loop's, and the benchmarks' that compare a consumer with it (bench/ingest.py)."""
        return {
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "max_poll_records": self.batch_max_events,
            "fetch_max_bytes": 64 * 1024 * 1024,
            "max_partition_fetch_bytes": 16 * 1024 * 1024,
            "fetch_max_wait_ms": self.fetch_max_wait_ms,  # not Kafka's 500: see Settings
        }
