"""What the scripted loopback servers in this package have in common."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from aiohttp import web


@dataclass(frozen=True)
class Status:
    """Answer with this HTTP status, raw body and headers (e.g. 429 with Retry-After, 500)."""

    status: int
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)


async def serve_on_loopback(
    app: web.Application, shutdown_timeout: float
) -> tuple[web.AppRunner, int]:
    """``app`` served on 127.0.0.1 at a free port the kernel chooses: its runner (clean it up
    to stop) and the port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock, shutdown_timeout=shutdown_timeout).start()
    return runner, sock.getsockname()[1]
