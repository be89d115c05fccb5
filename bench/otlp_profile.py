"""Where the worker's CPU goes on ``/v1/traces``, in process: decode, map, store.

The bodies are ``bench/otlp.py``'s (the examples/otel_agent.py agent's spans from the real OTel
SDK, 512-span batches, gzip protobuf). Each body is inflated, decoded (``decode_request``) and
handed to a real ``TraceAssembler`` over a freshly migrated scratch database
(``PendingTraces``), as the worker does; ``publish`` serializes the events as the producer does
(``AgentEvent.to_json``). CPU time (``time.process_time``, this process only: Postgres's own
work is not counted, the client side of each statement is) per step and per stored event:

- decode: inflating and ``decode_request``;
- map: ``map_spans`` over the same spans as whole traces (no store), measured on its own;
- handle: ``TraceAssembler.handle`` (the store's look-ups, parking, settling and the mapping);
- store: of handle, the calls to the store (``PendingTraces``; their client side);
- publish: the events' JSON;
- validate: the contract validation of the events as the mapping builds them (dicts), apart
  (it is inside map and handle).

Each step's least CPU time over ``--repeat`` runs is printed (a loaded machine inflates some
runs). The collector is tuned as in the worker (``monitor.core.gc_tuning.tune_gc``, after the
bodies are made): with the default thresholds its collections, walking the decoded requests
held, are a third of the mapping's time, which the worker does not pay.

``--profile N`` prints the N costliest functions of ``handle`` (cProfile, cumulative). Uses
``DATABASE_URL``'s server when set, else a private embedded Postgres::

    .venv/bin/python bench/otlp_profile.py                       # 3,000 conversations
    .venv/bin/python bench/otlp_profile.py --profile 30
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import pstats
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.harness import on_postgres, scratch_database
from bench.otlp import make_requests
from monitor.contract.events import AgentEvent, validate_event
from monitor.core.gc_tuning import tune_gc
from monitor.otel.decode import PROTOBUF, decode_request
from monitor.otel.mapping import MappingConfig, map_spans
from monitor.otel.pending import PendingLimits, PendingTraces
from monitor.otel.spans import Span
from monitor.otel.traces import PendingStore, TraceAssembler
from monitor.store.engine import make_engine


def decode_all(bodies: list[bytes]) -> list[list[Span]]:
    return [decode_request(gzip.decompress(b), PROTOBUF) for b in bodies]


async def run(db_url: str, args: argparse.Namespace) -> None:
    bodies, _, events, n_spans = make_requests(args.conversations)
    print(f"{args.conversations} conversations: {n_spans} spans, {events} events")
    tune_gc()  # as the worker does
    config = MappingConfig()
    best: dict[str, float] = {}
    profiler = cProfile.Profile(time.process_time) if args.profile else None
    for _ in range(args.repeat):  # each step's least CPU time over the repeats
        spent = await one_run(db_url, bodies, config, events, profiler)
        best = {k: min(v, best.get(k, v)) for k, v in spent.items()}

    def per(seconds: float) -> str:
        return f"{seconds * 1e6 / events:6.1f} us/event"

    print(f"decode  {per(best['decode'])}")
    print(f"map     {per(best['map'])}  (map_spans alone, per request)")
    print(f"handle  {per(best['handle'])}  (TraceAssembler.handle, without publish)")
    print(f"store   {per(best['store'])}  (of handle: the calls to PendingTraces)")
    print(f"publish {per(best['publish'])}  (the events' JSON)")
    print(f"validate {per(best['validate'])} (of map: validate_event on the events as dicts)")
    total = best["decode"] + best["handle"] + best["publish"]
    print(f"total   {per(total)}  (decode + handle + publish)")
    if profiler:
        stats: Any = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(*(args.only or []), args.profile)
        stats.sort_stats("tottime").print_stats(*(args.only or []), args.profile)


async def one_run(
    db_url: str,
    bodies: list[bytes],
    config: MappingConfig,
    events: int,
    profiler: cProfile.Profile | None,
) -> dict[str, float]:
    """CPU seconds of each step over all ``bodies`` (decoded afresh: a span works some things
    out once), ``handle`` on a freshly migrated database."""
    t0 = time.process_time()
    requests = decode_all(bodies)
    decode_s = time.process_time() - t0
    t0 = time.process_time()
    for spans in decode_all(bodies):  # the mapping alone: each body's traces, whole or not
        map_spans(spans, config)
    map_s = time.process_time() - t0 - decode_s

    published: list[AgentEvent] = []

    async def publish(batch: list[AgentEvent]) -> None:
        published.extend(batch)

    async with scratch_database(db_url, "otlpprof") as url:
        engine = make_engine(url, pool_size=2)
        store = Timed(PendingTraces(engine, PendingLimits(), lambda: datetime.now(UTC)))
        assembler = TraceAssembler(config, cast(PendingStore, store))
        await assembler.waiting()  # connects
        t0 = time.process_time()
        if profiler:
            profiler.enable()
        for spans in requests:
            await assembler.handle(spans, publish)
        if profiler:
            profiler.disable()
        handle_s = time.process_time() - t0
        await engine.dispose()
    t0 = time.process_time()
    for e in published:
        e.to_json()
    publish_s = time.process_time() - t0
    dicts = [e.model_dump(by_alias=True, exclude_none=True) for e in published]
    t0 = time.process_time()
    for d in dicts:
        validate_event(d)
    validate_s = time.process_time() - t0
    stored = len({e.event_id for e in published})
    assert stored == events, (stored, events)
    return {
        "decode": decode_s,
        "map": map_s,
        "handle": handle_s,
        "store": store.spent,
        "publish": publish_s,
        "validate": validate_s,
    }


class Timed:
    """A store whose calls' CPU time is summed in ``spent`` (nothing else runs meanwhile)."""

    def __init__(self, store: PendingTraces) -> None:
        self.store = store
        self.spent = 0.0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            try:
                return await method(*args, **kwargs)
            finally:
                self.spent += time.process_time() - t0

        return timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3, help="Runs; the least CPU is shown.")
    parser.add_argument("--profile", type=int, default=0, help="Print the N costliest calls.")
    parser.add_argument("--only", action="append", help="Print only calls matching (regex).")
    args = parser.parse_args()
    on_postgres("bench-otlp-profile-", lambda url: run(url, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
