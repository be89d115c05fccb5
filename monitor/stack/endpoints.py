"""Where the embedded stack of ``monitor up`` listens, so other commands can find it.

``monitor up`` writes ``<state_dir>/endpoints.json``; ``resolve`` fills unset broker and
database settings from it while the stack is running (both ports accept connections).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from monitor.config import Settings
from monitor.stack.ports import wait_for_port


@dataclass(frozen=True)
class Endpoints:
    kafka_bootstrap: str
    database_url: str
    web_url: str


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
    path = path_for(settings)
    if not path.exists():
        return settings
    try:
        ep = Endpoints(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return settings
    if not _alive(ep.kafka_bootstrap):
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
