"""The worker's origin key: the secret that tags the gate's decision events
(:mod:`monitor.contract.origin`), so the ingest tells them from an event claiming their id.

``MONITOR_GATE_ORIGIN_KEY`` when set (every worker sharing a topic sets the same one);
otherwise a random 32-byte key created once in ``state_dir/gate-origin.key`` (mode 0600), next
to the gate's disk buffer, so decision events buffered by an earlier run still verify.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

KEY_FILE = "gate-origin.key"


def origin_key(configured: str | None, state_dir: Path) -> bytes:
    """The configured key, else the one kept in ``state_dir`` (created when missing)."""
    if configured:
        return configured.encode()
    path = state_dir / KEY_FILE
    state_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    return bytes.fromhex(path.read_text().strip())
