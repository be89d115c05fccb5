"""Where the embedded stack of ``monitor up`` listens, so other commands and scripts can find
it.

``monitor up`` writes ``<state_dir>/endpoints.json`` before it starts the worker and removes it
when it stops: the broker, the database, the worker's web address (``/v1/events``,
``/v1/traces``, ``/metrics``), the gate process's (``/v1/gate``) and ``ports``, every port the
stack listens on by what listens there (``broker`` and ``postgres`` only when ``monitor up``
started them; ``worker``, ``gate`` and ``otlp_grpc`` always). For example::

    {"kafka_bootstrap": "127.0.0.1:9092", "database_url": "postgresql://...@127.0.0.1:5433/monitor",
     "web_url": "http://127.0.0.1:6066", "gate_url": "http://127.0.0.1:6067",
     "ports": {"broker": 9092, "postgres": 5433, "worker": 6066, "gate": 6067,
                "otlp_grpc": 4317}}

``resolve`` fills unset broker and database settings from it while the stack is running (the
broker's port accepts connections).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from monitor.config import Settings
from monitor.stack.ports import wait_for_port


@dataclass(frozen=True)
class Endpoints:
    """What ``endpoints.json`` holds (module docstring); ``ports`` by what listens there."""

    kafka_bootstrap: str
    database_url: str
    web_url: str
    gate_url: str = ""
    ports: dict[str, int] = field(default_factory=dict)


def read(settings: Settings) -> Endpoints | None:
    """The endpoints a ``monitor up`` on ``settings.state_dir`` wrote; None when there is no
    file or it cannot be read as one."""
    path = path_for(settings)
    try:
        return Endpoints(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def path_for(settings: Settings) -> Path:
    return settings.state_dir / "endpoints.json"


def write(settings: Settings, endpoints: Endpoints) -> Path:
    path = path_for(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(endpoints), indent=2) + "\n")
    return path


def remove(settings: Settings) -> None:
    path_for(settings).unlink(missing_ok=True)


def _alive(bootstrap: str) -> bool:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    return wait_for_port(host, int(port), timeout_s=0.5)


def resolve(settings: Settings) -> Settings:
    """``settings`` with unset broker/database taken from a running ``monitor up``, if any."""
    if settings.kafka_bootstrap and settings.database_url:
        return settings
    ep = read(settings)
    if ep is None or not _alive(ep.kafka_bootstrap):
        return settings
    return settings.model_copy(
        update={
            "kafka_bootstrap": settings.kafka_bootstrap or ep.kafka_bootstrap,
            "database_url": settings.database_url
            or Settings(database_url=ep.database_url).database_url,
            "kafka_idempotent": False
            if not settings.kafka_bootstrap
            else settings.kafka_idempotent,
        }
    )
