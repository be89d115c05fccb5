"""The gate process for ``bench/gate.py``: ``monitor gate serve`` plus the baseline's page.

``POST /bench/constant`` is served by the same aiohttp application, in the same process and on
the same event loop as ``POST /v1/gate`` (a :class:`GateServer` with one more route): it checks
the credential and reads the body the same way (``receive_gate``, the gate's limits), answers a
constant, pre-serialized JSON of a gate answer's size (200) without deciding, and publishes one
decision event through the gate's own path (``GateAnswerer.publish_after``: the decision outbox, the
producer, the disk buffer when the broker is slow), a fresh ``event_id`` on a decision event
built once at start. So the gate/baseline ratio is the cost of deciding alone (parse, checks,
building the decision event), publication being in both. ``GET /bench/ping`` answers ``{}``
and does nothing else (the open-loop client's floor). Run by the bench as
``python bench/gate_process.py``; the settings come from the environment like
``monitor gate serve``. ``BENCH_NO_TUNE_GC=1`` leaves the collector's defaults (to measure
what ``tune_gc`` does for the gate process)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from aiohttp import web

from bench.gate import body
from monitor.auth.authorizer import Grant
from monitor.config import Settings, load_settings
from monitor.contract.events import AgentEvent
from monitor.core.gc_tuning import tune_gc
from monitor.gate.checks import CheckSet
from monitor.gate.decide import decide, decision_event
from monitor.gate.endpoint import GateReply
from monitor.gate.policy import DEFAULT_POLICY
from monitor.gate.request import parse_gate_request
from monitor.gate.server import GateServer, set_priority

#: a gate answer's shape and size (two findings), constant
CONSTANT = (
    b'{"decision":"revise","confidence":0.85,"calibrated":false,"calibrated_confidence":0.85,'
    b'"map_version":null,"threshold":0.5,"threshold_source":"policy built-in rules[0]",'
    b'"findings":[{"judge":"det.authorization","category":"fabrication:authorization",'
    b'"critique":"claims cancel done with no successful matching tool call before it"},'
    b'{"judge":"det.ignored_error","category":"wrong_information","critique":"speaks of '
    b'success after a failed tool call"}],"policy_version":"built-in-1","degraded":null,'
    b'"latency_ms":0.5,"decision_id":"gate:00000000000000000000000000000000",'
    b'"maps_loaded_at":"2026-01-01T00:00:00+00:00"}'
)


def template_event() -> AgentEvent:
    """The decision event of the bench's request, decided once by the shipped code."""
    req = parse_gate_request(body("bench-c0"), max_body_bytes=10**7, max_content_chars=10**5)
    now = datetime.now(UTC)
    made = decide(
        req, DEFAULT_POLICY, {}, CheckSet(), event_id="gate:t", now=now, timer=time.perf_counter
    )
    return decision_event(req, made, now)


class BenchGateServer(GateServer):
    """The gate process with ``POST /bench/constant`` (module docstring)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.template = template_event()

    def application(self) -> web.Application:
        app = super().application()
        app.router.add_post("/bench/constant", self.handle_constant)
        app.router.add_get("/bench/ping", self.handle_ping)
        return app

    async def handle_ping(self, request: web.Request) -> web.Response:
        """A constant answer, nothing read, checked or published: the floor of the client,
        the HTTP stack and this process's event loop."""
        return web.Response(body=b"{}", content_type="application/json")

    async def handle_constant(self, request: web.Request) -> web.Response:
        def constant(body: bytes | None, grant: Grant) -> GateReply:
            event = self.template.model_copy(update={"event_id": f"gate:{uuid.uuid4().hex}"})
            return GateReply(200, {}, event=event)

        answerer = self.answerer
        reply = await answerer.receive(
            request.headers, request.remote, request.content.readany, constant
        )
        if reply.event is not None:  # as GateAnswerer.answer: sent after the answer
            answerer.publish_after(reply.event)
        return web.Response(body=CONSTANT, status=reply.status, content_type="application/json")


async def serve(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    set_priority(settings.gate_nice)  # as monitor.gate.server.serve
    server = BenchGateServer(settings)
    try:
        await server.start()
        if not os.environ.get("BENCH_NO_TUNE_GC"):  # as monitor.gate.server.serve
            tune_gc()
        await stop.wait()
    finally:
        await server.close()


if __name__ == "__main__":
    asyncio.run(serve(load_settings()))
