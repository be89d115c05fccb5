"""The pure cores of "refuse before working": token buckets, capped streamed inflation, the
body reader, and the ingest endpoint's order of work (nothing read before it is admitted)."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from google.rpc import status_pb2

from monitor.auth.admission import Authorize
from monitor.auth.authorizer import Authorizer, Denied, Grant
from monitor.auth.keys import ApiKey, hash_secret, new_secret
from monitor.core.errors import BadEncoding, BodyTimeout, BodyTooLarge
from monitor.core.http_body import BodyLimits, read_body
from monitor.core.http_guard import Guard
from monitor.core.http_reply import Reply, inline
from monitor.core.inflate import STEP, Inflater
from monitor.core.rate_limit import Rate, RateLimiter, retry_after
from monitor.gate.endpoint import GateLimits, GateReply, receive_gate
from monitor.ingest.endpoint import IngestLimits, receive_events
from monitor.otel.mapping import MappingConfig
from monitor.otel.receiver import TraceLimits, receive_traces
from tests.factories import event_dict

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SCOPED = new_secret()  # an API key for agent "bot" only, with every scope
ALL_SCOPES = ("write", "gate", "read")
KEYS = {hash_secret(SCOPED): ApiKey("key_bot", "", hash_secret(SCOPED), ("bot",), ALL_SCOPES)}
GATE_ONLY = new_secret()
KEYS[hash_secret(GATE_ONLY)] = ApiKey("key_g", "", hash_secret(GATE_ONLY), ("*",), ("gate",))
WRITE_ONLY = new_secret()
KEYS[hash_secret(WRITE_ONLY)] = ApiKey("key_w", "", hash_secret(WRITE_ONLY), ("*",), ("write",))


def authorizer(action: str, token: str | None = "tok") -> Authorize:
    """The worker's authorizer for ``action`` with ``token`` as its shared token."""
    checks = Authorizer(KEYS, {action: token}, lambda: NOW)  # type: ignore[dict-item]

    async def authorize(authorization: str | None) -> Grant | Denied:
        return checks.check(authorization, action)  # type: ignore[arg-type]

    return authorize


class Ticks:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_token_bucket_burst_refill_and_bounded_keys() -> None:
    clock = Ticks()
    limiter = RateLimiter(Rate(per_s=2, burst=3), clock, max_keys=2)
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.take("a")
    assert wait == pytest.approx(0.5) and retry_after(wait) == "1"
    assert limiter.take("b") == 0.0  # another key has its own bucket
    clock.t = 0.5  # one token back for "a"
    assert limiter.take("a") == 0.0 and limiter.take("a") > 0
    limiter.take("c")
    assert len(limiter) == 2  # the least recently used key ("b") was forgotten
    assert RateLimiter(Rate(0, 1), clock).take("x") == 0.0  # 0: unlimited


def bomb(inflated: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join([z.compress(bytes(1 << 20)) for _ in range(inflated >> 20)] + [z.flush()])


def test_a_bomb_is_refused_after_the_cap_not_inflated_whole() -> None:
    body = bomb(64 << 20)
    inflater = Inflater("gzip", max_bytes=1 << 20, max_ratio=1e9)
    with pytest.raises(BodyTooLarge, match="over the limit"):
        for _ in inflater.feed(body):
            pass
    assert inflater.produced <= (1 << 20) + STEP
    ratio = Inflater("gzip", max_bytes=1 << 30, max_ratio=100, ratio_floor=1 << 20)
    with pytest.raises(BodyTooLarge, match="100 times"):
        for _ in ratio.feed(body):
            pass
    assert ratio.produced <= (1 << 20) + STEP


def test_gzip_members_deflate_identity_and_corrupt_bodies() -> None:
    data = b'{"a": 1}' * 1000
    two = gzip.compress(data[:3000]) + gzip.compress(data[3000:])
    inflater = Inflater("gzip", 1 << 20, 100)
    assert b"".join(inflater.feed(two)) == data
    inflater.finish()
    assert b"".join(Inflater("deflate", 1 << 20, 100).feed(zlib.compress(data))) == data
    assert b"".join(Inflater("identity", 1 << 20, 100).feed(data)) == data
    with pytest.raises(BadEncoding):
        list(Inflater("gzip", 1 << 20, 100).feed(b"\x1f\x8bnot gzip at all"))
    truncated = Inflater("gzip", 1 << 20, 100)
    list(truncated.feed(gzip.compress(data)[:-30]))
    with pytest.raises(BadEncoding, match="truncated"):
        truncated.finish()


def reader(chunks: list[bytes], delay: float = 0.0) -> tuple[list[int], object]:
    calls = [0]

    async def read_chunk() -> bytes:
        calls[0] += 1
        if delay:
            await asyncio.sleep(delay)
        return chunks.pop(0) if chunks else b""

    return calls, read_chunk


async def test_read_body_refuses_declared_streamed_and_slow_bodies() -> None:
    limits = BodyLimits(max_bytes=1000, timeout_s=0.3)
    calls, read_chunk = reader([b"x" * 10])
    with pytest.raises(BodyTooLarge):
        await read_body(read_chunk, content_length="5000", content_encoding=None, limits=limits)
    assert calls == [0]  # refused from the header alone
    calls, read_chunk = reader([b"x" * 600] * 10)
    with pytest.raises(BodyTooLarge):
        await read_body(read_chunk, content_length=None, content_encoding=None, limits=limits)
    assert calls == [2]  # stopped as soon as the stream passed the limit
    calls, read_chunk = reader([b"x"] * 100, delay=0.05)
    with pytest.raises(BodyTimeout):
        await read_body(read_chunk, content_length=None, content_encoding=None, limits=limits)
    assert calls[0] < 10
    _, read_chunk = reader([gzip.compress(b"[1]")])
    got = await read_body(read_chunk, content_length=None, content_encoding="gzip", limits=limits)
    assert got == b"[1]"


def guard(per_s: float = 0, burst: float = 1, strangers: float = 0) -> Guard:
    clock = Ticks()
    return Guard(RateLimiter(Rate(per_s, burst), clock), RateLimiter(Rate(strangers, 2), clock))


async def ingest(headers: dict[str, str], body: bytes, g: Guard) -> tuple[int, dict, list[int]]:
    calls, read_chunk = reader([body])
    published: list[object] = []

    async def publish(events: list[object]) -> None:
        published.extend(events)

    limits = IngestLimits(BodyLimits(1 << 20), 100, timedelta(minutes=5), 10)
    reply = await receive_events(
        headers=headers,
        peer="10.0.0.1",
        read_chunk=read_chunk,
        publish=publish,
        authorize=authorizer("write"),
        limits=limits,
        guard=g,
        now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
        offload=inline,
    )
    return reply.status, {**json.loads(reply.body), **reply.headers}, calls


async def test_ingest_admits_before_reading() -> None:
    body = json.dumps([event_dict("e1"), event_dict("e2")]).encode()
    ok = {"Authorization": "Bearer tok", "Content-Type": "application/json"}
    status, answer, calls = await ingest(ok, body, guard())
    assert status == 202 and answer["accepted"] == 2 and calls == [2]
    # a wrong token: 401, then 429 once the address failed too often; nothing read
    g = guard(strangers=1)
    got = [await ingest({"Authorization": "Bearer no"}, body, g) for _ in range(3)]
    assert [s for s, _, _ in got] == [401, 401, 429]
    assert got[2][1]["reason"] == "rate_limited" and got[2][1]["Retry-After"] == "1"
    assert all(c == [0] for _, _, c in got)
    # the credential's rate, the media type, the encoding: refused before the body is read
    g = guard(per_s=1, burst=1)
    assert (await ingest(ok, body, g))[0] == 202
    status, answer, calls = await ingest(ok, body, g)
    assert status == 429 and answer["Retry-After"] == "1" and calls == [0]
    status, answer, calls = await ingest({**ok, "Content-Type": "text/html"}, body, guard())
    assert status == 415 and answer["reason"] == "unsupported_media" and calls == [0]
    status, answer, calls = await ingest({**ok, "Content-Encoding": "br"}, body, guard())
    assert status == 415 and answer["reason"] == "unsupported_encoding" and calls == [0]
    status, answer, calls = await ingest({**ok, "Content-Length": str(2 << 20)}, body, guard())
    assert status == 413 and answer["reason"] == "too_large" and calls == [0]
    # no Content-Type (older clients) and NDJSON are accepted
    ndjson = b"\n".join(json.dumps(event_dict(f"n{i}")).encode() for i in range(2))
    assert (await ingest({"Authorization": "Bearer tok"}, ndjson, guard()))[0] == 202
    nd = {**ok, "Content-Type": "application/x-ndjson"}
    assert (await ingest(nd, ndjson, guard()))[0] == 202


async def test_ingest_asks_the_authorizer_for_scope_and_rate_key() -> None:
    body = json.dumps([event_dict("e1", agent="bot"), event_dict("e2", agent="other")]).encode()
    scoped = {"Authorization": f"Bearer {SCOPED}"}
    status, answer, calls = await ingest(scoped, body, guard())
    assert status == 207 and calls == [2]
    assert [r.get("reason") for r in answer["results"]] == [None, "out_of_scope"]
    # a known key without the scope: 403 with its reason, never the strangers' 429
    g = guard(strangers=1)
    got = [await ingest({"Authorization": f"Bearer {GATE_ONLY}"}, body, g) for _ in range(4)]
    assert [(s, a["reason"], c) for s, a, c in got] == [(403, "missing_scope", [0])] * 4
    # the rate is per credential identity: the key and the shared token have their own buckets
    g = guard(per_s=1, burst=1)
    shared = {"Authorization": "Bearer tok"}
    one = json.dumps([event_dict("e3", agent="bot")]).encode()
    assert [(await ingest(h, one, g))[0] for h in (scoped, shared, scoped, shared)] == [
        202,
        202,
        429,
        429,
    ]


async def test_gate_and_traces_admit_before_reading() -> None:
    decided: list[bytes | None] = []

    grants: list[Grant] = []

    def decide_body(body: bytes | None, grant: Grant) -> GateReply:
        decided.append(body)
        grants.append(grant)
        return GateReply(200, {"decision": "proceed"})

    async def gate(
        headers: dict[str, str], g: Guard, peer: str = "10.0.0.9", loopback_open: bool = False
    ) -> tuple:
        calls, read_chunk = reader([b"{}"])
        reply = await receive_gate(
            headers=headers,
            peer=peer,
            read_chunk=read_chunk,
            authorize=authorizer("gate", "g"),
            limits=GateLimits(1024, 100, loopback_open=loopback_open),
            guard=g,
            decide_body=decide_body,
        )
        return reply.status, reply.body.get("reason"), reply.headers, calls

    ok = {"Authorization": "Bearer g", "Content-Type": "application/json"}
    assert await gate(ok, guard()) == (200, None, {}, [2])
    g = guard(strangers=1)
    got = [await gate({"Authorization": "Bearer x"}, g) for _ in range(3)]
    assert [(s, r) for s, r, _, _ in got] == [(401, "unauthorized")] * 2 + [(429, "rate_limited")]
    assert got[2][2] == {"Retry-After": "1"} and all(c == [0] for *_, c in got)
    assert (await gate({**ok, "Content-Type": "text/plain"}, guard()))[:2] == (
        415,
        "unsupported_media",
    )
    status, _, _, calls = await gate({**ok, "Content-Length": "5000"}, guard())
    assert (status, calls) == (200, [0]) and decided[-1] is None  # decide_body answers 413
    g = guard(per_s=1)
    assert (await gate(ok, g))[0] == 200
    assert (await gate(ok, g))[:2] == (429, "rate_limited")
    # the grant reaches the decision (an API key: its agents only); 403s of a known key
    assert (await gate({**ok, "Authorization": f"Bearer {SCOPED}"}, guard()))[0] == 200
    assert grants[-1].key_id == "key_bot" and grants[-1].agents == ("bot",)
    unknown = {"Authorization": f"Bearer {new_secret()}"}
    assert (await gate(unknown, guard()))[:2] == (401, "unauthorized")
    g = guard(strangers=1)
    got = [(await gate({"Authorization": f"Bearer {WRITE_ONLY}"}, g))[:2] for _ in range(3)]
    assert got == [(403, "missing_scope")] * 3
    # gate_token unset: loopback callers without a credential only (403 not_loopback counted
    # with the strangers); with a token set, loopback needs it too
    assert (await gate({}, guard(), "127.0.0.1", loopback_open=True))[0] == 200
    assert grants[-1].agents is None
    g = guard(strangers=1)
    got = [(await gate({}, g, "10.0.0.9", loopback_open=True))[:2] for _ in range(3)]
    assert got == [(403, "not_loopback")] * 2 + [(429, "rate_limited")]
    assert (await gate({}, guard(), "127.0.0.1"))[:2] == (401, "unauthorized")
    # auth first: a stranger gets no size hint
    assert (await gate({"Content-Length": "5000"}, guard()))[:2] == (401, "unauthorized")

    async def publish(events: list[object]) -> None:
        pass

    answers: list[bytes] = []

    async def traces(headers: dict[str, str | None], g: Guard) -> tuple[int, list[int]]:
        calls, read_chunk = reader([b""])
        answer = await receive_traces(
            authorization=headers.get("a"),
            content_type=headers.get("t"),
            content_encoding=None,
            content_length=None,
            read_chunk=read_chunk,
            publish=publish,
            authorize=authorizer("write"),
            limits=TraceLimits(1024, 10),
            config=MappingConfig(),
            guard=g,
            peer="10.0.0.7",
        )
        answers.append(answer.body)
        return answer.status, calls

    proto = "application/x-protobuf"
    g = guard(strangers=1)
    assert [await traces({"a": "Bearer no", "t": proto}, g) for _ in range(3)] == [
        (401, [0]),
        (401, [0]),
        (429, [0]),
    ]
    assert await traces({"a": "Bearer tok", "t": "text/csv"}, guard()) == (415, [0])
    g = guard(per_s=1)
    assert (await traces({"a": "Bearer tok", "t": proto}, g))[0] == 200
    assert await traces({"a": "Bearer tok", "t": proto}, g) == (429, [0])
    # a known key without the write scope: 403 PERMISSION_DENIED, not counted as a stranger
    g = guard(strangers=1)
    got = [await traces({"a": f"Bearer {GATE_ONLY}", "t": proto}, g) for _ in range(3)]
    assert got == [(403, [0])] * 3
    refused = status_pb2.Status()
    refused.ParseFromString(answers[-1])
    assert refused.code == 7 and "lacks the 'write' scope" in refused.message


async def test_ingest_answers_503_when_the_bus_fails() -> None:
    async def publish(events: list[object]) -> None:
        raise ConnectionError("broker gone")

    _, read_chunk = reader([json.dumps([event_dict("e1")]).encode()])
    reply = await receive_events(
        headers={"Authorization": "Bearer tok"},
        peer=None,
        read_chunk=read_chunk,
        publish=publish,
        authorize=authorizer("write"),
        limits=IngestLimits(BodyLimits(1 << 20), 100, timedelta(minutes=5)),
        guard=guard(),
        now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
        offload=inline,
    )
    body = json.loads(reply.body)
    assert reply.status == 503 and body["reason"] == "bus_unavailable"
    assert "ConnectionError" in body["error"]


async def test_bodies_in_flight_are_bounded() -> None:
    slots = asyncio.Semaphore(1)
    await slots.acquire()  # another request holds the only slot

    async def publish(events: list[object]) -> None:
        pass

    limits = IngestLimits(BodyLimits(1 << 20, timeout_s=0.2), 100, timedelta(minutes=5))

    def ask(read_chunk: Callable[[], Awaitable[bytes]]) -> Awaitable[Reply]:
        return receive_events(
            headers={"Authorization": "Bearer tok"},
            peer=None,
            read_chunk=read_chunk,
            publish=publish,
            authorize=authorizer("write"),
            limits=limits,
            guard=guard(),
            now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
            offload=inline,
            slots=slots,
        )

    calls, read_chunk = reader([json.dumps([event_dict("e1")]).encode()])
    reply = await ask(read_chunk)
    assert reply.status == 503 and json.loads(reply.body)["reason"] == "busy"
    assert reply.headers == {"Retry-After": "1"} and calls == [0]
    slots.release()  # freed: the next request is read and accepted, and gives its slot back
    calls, read_chunk = reader([json.dumps([event_dict("e1")]).encode()])
    reply = await ask(read_chunk)
    assert reply.status == 202 and not slots.locked()
