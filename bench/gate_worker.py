"""The worker for ``bench/gate.py``: the real worker plus one page for the baseline.

``POST /bench/constant`` is served by the same faust/aiohttp web server in the same process as
``POST /v1/gate`` (ingest and the other services running alike): it reads the body the same way
(``read_body`` under the gate's body limits) and answers a constant, pre-serialized JSON of a
gate answer's size (200), so the gate/baseline ratio is the cost of deciding (parse, checks,
decision event) over the same web stack. ``BENCH_SLOW_CALLBACK_MS=5`` logs every event-loop
step longer than 5 ms to ``BENCH_SLOW_LOG`` (asyncio debug mode: slower; for finding the tail
only). Run by the bench as ``python bench/gate_worker.py``; the settings come from the
environment like ``monitor worker``."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

import faust
from faust.web import Request, Response, View

from monitor.config import load_settings
from monitor.core.gc_tuning import tune_gc
from monitor.core.http_body import BodyLimits, read_body
from monitor.worker.app import chunks, create_app

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


def main() -> None:
    settings = load_settings()
    app = create_app(settings)

    @app.page("/bench/constant")
    class Constant(View):
        async def post(self, request: Request) -> Response:
            await read_body(
                chunks(request),
                content_length=request.headers.get("Content-Length"),
                content_encoding=request.headers.get("Content-Encoding"),
                limits=BodyLimits(settings.gate_max_body_bytes),
            )
            return self.bytes(CONSTANT, content_type="application/json")

    slow_ms = os.environ.get("BENCH_SLOW_CALLBACK_MS")
    if slow_ms:  # diagnosis: log every event-loop step longer than this (asyncio debug mode)
        handler = logging.FileHandler(os.environ.get("BENCH_SLOW_LOG", "slow-callbacks.log"))
        logging.getLogger("asyncio").addHandler(handler)

        @app.task
        async def _slow_callbacks() -> None:
            loop = asyncio.get_running_loop()
            loop.set_debug(True)
            loop.slow_callback_duration = float(slow_ms) / 1000

    worker = faust.Worker(app, loglevel="info", quiet=True, redirect_stdouts=False)
    tune_gc()  # as run_worker does
    worker.spinner = None
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
