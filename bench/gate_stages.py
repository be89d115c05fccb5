"""Where one gate decision's time goes, in process: CPU time per request of each stage.

No worker, no broker: the bodies of ``bench/gate.py`` (256 conversations in turn) through
``parse_gate_request`` (without and with the history cache), ``decide``, the answer's JSON,
the decision event (built, serialized for the producer, decoded again as the worker's own
ingest does) and the authorizer's check with ``decide_gate`` in all; the constant-answer path
(a wrong token) is the in-handler baseline; ``decide_gate`` again with the checks' states
kept per conversation (``CheckStates``, as the gate process) where the checkout has them.
``--repo`` runs the same stages against another checkout (e.g. a ``git worktree`` of the
commit before a change) to compare, in the same minutes::

    .venv/bin/python bench/gate_stages.py                       # this checkout, domain retail
    .venv/bin/python bench/gate_stages.py --domain airline      # the airline policy as reference
    .venv/bin/python bench/gate_stages.py --repo ../before      # another checkout
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def stage(label: str, fn: Callable[[], Any], n: int = 2000) -> None:
    """Print the best of 3 rounds of ``n`` calls, CPU microseconds per call."""
    for _ in range(100):
        fn()
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - start) / n * 1e6)
    print(f"{label:50s} {best:8.1f} us", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repo", type=Path, default=HERE.parent, help="Checkout to measure.")
    parser.add_argument("--domain", default="retail")
    args = parser.parse_args()
    sys.path.insert(0, str(args.repo.resolve()))  # its monitor package, before this one's
    from pydantic_core import to_json

    from monitor.auth.authorizer import Authorizer, Grant
    from monitor.contract.events import decode_event
    from monitor.gate import checks as gate_checks
    from monitor.gate import request as gate_request
    from monitor.gate.checks import CheckSet
    from monitor.gate.decide import decide, decision_event
    from monitor.gate.endpoint import GateLimits, decide_gate, gate_rule
    from monitor.gate.policy import DEFAULT_POLICY
    from monitor.judges.domains import load_domains

    sys.path.insert(0, str(HERE.parent))  # this checkout's bench (monitor is imported)
    from bench.gate import body

    print("monitor from", Path(gate_request.__file__).parent.parent)
    checks, now, policy = CheckSet(load_domains(None)), datetime.now(UTC), DEFAULT_POLICY

    def with_domain(cid: str) -> bytes:
        data = json.loads(body(cid))
        data["domain"] = args.domain
        return json.dumps(data).encode()

    bodies = [with_domain(f"bench-c{i}") for i in range(256)]
    next_body = itertools.cycle(bodies).__next__
    limits = {"max_body_bytes": 1 << 20, "max_content_chars": 20_000}
    parse = gate_request.parse_gate_request
    stage("parse + validate history", lambda: parse(next_body(), **limits))
    cache_cls = getattr(gate_request, "HistoryCache", None)
    extra: dict[str, Any] = {}
    if cache_cls is not None:
        cache = cache_cls()
        stage(
            "parse + validate history (cached)",
            lambda: parse(next_body(), history_cache=cache, **limits),
        )
        extra = {"history_cache": cache_cls()}
    states_cls = getattr(gate_checks, "CheckStates", None)
    if states_cls is not None and extra:
        extra_states = {**extra, "history_cache": cache_cls(), "check_states": states_cls()}
    reqs = itertools.cycle([parse(b, **limits) for b in bodies]).__next__
    timer = time.perf_counter

    def decide_next() -> Any:
        return decide(reqs(), policy, {}, checks, event_id="gate:x", now=now, timer=timer)

    stage("decide (rule, map, checks, payload)", decide_next)
    req = reqs()
    decision = decide(req, policy, {}, checks, event_id="gate:x", now=now, timer=time.perf_counter)
    answer = decision.answer()
    stage("answer dict", decision.answer)
    stage("answer json.dumps", lambda: json.dumps(answer).encode())
    stage("answer pydantic_core.to_json", lambda: to_json(answer))
    stage("decision event (AgentEvent)", lambda: decision_event(req, decision, now))
    event = decision_event(req, decision, now)
    stage("decision event to_json (producer)", event.to_json)
    raw = event.to_json()
    stage("decision event decoded (the worker's ingest)", lambda: decode_event(raw))
    gate_limits = GateLimits(1 << 20, 20_000)
    authorizer = Authorizer({}, {"gate": "tok"}, lambda: now)

    def ask(token: str) -> Any:
        grant = gate_rule(authorizer.check(f"Bearer {token}", "gate"), "127.0.0.1", False)
        if not isinstance(grant, Grant):
            return grant
        return decide_gate(
            next_body(),
            limits=gate_limits,
            policy=policy,
            maps={},
            checks=checks,
            now=now,
            timer=time.perf_counter,
            started=time.perf_counter(),
            new_id=lambda: uuid.uuid4().hex,
            status={},
            grant=grant,
            **extra,
        )

    stage("authorize + decide_gate in all", lambda: ask("tok"))
    if states_cls is not None and extra:
        extra.update(extra_states)
        stage("authorize + decide_gate, check states kept", lambda: ask("tok"))
    stage("authorize, wrong token (constant answer)", lambda: ask("no"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
