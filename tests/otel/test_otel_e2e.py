"""OTLP in, end to end: real OTel SDK + official OTLP exporters -> real worker -> Postgres.

Spans come from real instrumentation libraries (openai-v2 with GenAI semconv content on spans;
OpenInference's OpenAI instrumentor) driving a real AsyncOpenAI client against the loopback
chat server, and from the OTel-only example agent in examples/ run as a script.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import gzip
import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.otel.agents import Plan, run_genai, run_openinference
from tests.servers.llm_server import ChatServer
from tests.servers.worker import WorkerProcess, count, create_topic, create_topics, wait_for_count

REPO = Path(__file__).resolve().parents[2]
TOKEN = "otel-s3cret"


@pytest.fixture
async def worker(broker, topic_name: str, database_url: str, tmp_path: Path):
    await create_topic(broker.bootstrap, topic_name)
    w = WorkerProcess(
        broker.bootstrap,
        database_url,
        topic_name,
        tmp_path,
        MONITOR_INGEST_TOKEN=TOKEN,
        MONITOR_JUDGE_ENABLED="false",
        MONITOR_ALERTING_ENABLED="false",
    ).start()
    try:
        await w.wait_ready()
        yield w
    finally:
        w.stop()


def labelled(worker: WorkerProcess, name: str, label: str) -> float:
    for line in httpx.get(f"{worker.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f'{name}{{result="{label}"}} '):
            return float(line.split()[-1])
    return 0.0


def plans(prefix: str, n: int, seed: int) -> list[Plan]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        c = round(rng.uniform(0.1, 0.95), 3)
        out.append(Plan(f"{prefix}-{i}", c, c < 0.3, rng.random() < c, tool_fails=i == 1))
    return out


async def rows(url: str, sql: str) -> list[dict]:
    import asyncpg

    from monitor.store.engine import libpq_url

    conn = await asyncpg.connect(libpq_url(url))
    try:
        return [dict(r) for r in await conn.fetch(sql)]
    finally:
        await conn.close()


async def test_openai_v2_protobuf_and_openinference_json_to_postgres(
    worker: WorkerProcess, database_url: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    genai_plans, oi_plans = plans("g", 6, 1), plans("oi", 6, 2)
    async with ChatServer() as server:
        genai_spans = await run_genai(server, genai_plans, "genai-bot")
        oi_spans = await run_openinference(server, oi_plans, "oi-bot")
    # the spans really are the libraries': their scopes name the instrumentations
    scopes = {s.instrumentation_scope.name for s in genai_spans + oi_spans}
    assert "opentelemetry.util.genai.handler" in scopes  # openai-v2 emits through util-genai
    assert any(s.startswith("openinference.instrumentation.openai") for s in scopes)

    headers = {"Authorization": f"Bearer {TOKEN}"}
    proto = OTLPSpanExporter(
        f"{worker.url}/v1/traces", headers=headers, compression=Compression.Gzip
    )
    as_json = JsonExporter(f"{worker.url}/v1/traces", headers=headers)
    assert await asyncio.to_thread(proto.export, genai_spans) == SpanExportResult.SUCCESS
    assert await asyncio.to_thread(as_json.export, oi_spans) == SpanExportResult.SUCCESS

    n_esc = sum(p.escalate for p in genai_plans + oi_plans)
    # per conversation: user, 2 assistant, tool_result, outcome (+ escalation); the agent
    # span's output repeats the last chat answer: not stored again
    total = 5 * 6 + 5 * 6 + n_esc
    assert await wait_for_count(database_url, total, stable_s=1.0) == total
    convs = {
        r["conversation_id"]: r for r in await rows(database_url, "SELECT * FROM conversations")
    }
    want = {p.conversation_id: p for p in genai_plans + oi_plans}
    assert set(convs) == set(want)
    for cid, plan in want.items():
        assert convs[cid]["escalated"] == plan.escalate, cid
        assert convs[cid]["outcome_success"] is plan.success, cid
    agents = {
        r["conversation_id"]: r["agent_id"]
        for r in await rows(database_url, "SELECT DISTINCT conversation_id, agent_id FROM events")
    }
    assert {agents[p.conversation_id] for p in genai_plans} == {"genai-bot"}
    assert {agents[p.conversation_id] for p in oi_plans} == {"oi-bot"}
    # calibration items: assistant messages with the agent's confidence
    items = await rows(
        database_url,
        "SELECT conversation_id, confidence AS c FROM events "
        "WHERE role = 'assistant' AND confidence IS NOT NULL",
    )
    assert sorted((r["conversation_id"], r["c"]) for r in items) == sorted(
        (p.conversation_id, p.confidence) for p in want.values()
    )
    failed = await rows(
        database_url,
        "SELECT conversation_id, body FROM events WHERE type = 'tool_result' AND NOT tool_ok",
    )
    assert sorted(r["conversation_id"] for r in failed) == ["g-1", "oi-1"]
    assert json.loads(failed[0]["body"])["tool_result"]["error"] == "order service timed out"
    assert labelled(worker, "monitor_otlp_spans_total", "dropped") == 12  # healthz + CHAIN

    # a re-sent export (the exporter retrying) is idempotent
    assert await asyncio.to_thread(proto.export, genai_spans) == SpanExportResult.SUCCESS
    assert await asyncio.to_thread(as_json.export, oi_spans) == SpanExportResult.SUCCESS
    for _ in range(200):
        if labelled(worker, "monitor_otlp_spans_total", "dropped") == 24:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(2.0)
    assert await count(database_url) == total


def run_example(worker: WorkerProcess, protocol: str, n: int, seed: int) -> str:
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{worker.url}/v1/traces",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"Authorization=Bearer%20{TOKEN}",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
        "OTEL_SERVICE_NAME": "example-service",
    }
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "otel_agent.py"),
            "--conversations",
            str(n),
            "--seed",
            str(seed),
            "--agent",
            "otel-support-bot",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Failed to export" not in done.stderr, done.stderr
    return done.stdout


def example_plan(n: int, seed: int) -> list[tuple[float, bool]]:
    """(confidence, success) per conversation, straight from the example's own spans."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spec = importlib.util.spec_from_file_location("otel_agent", REPO / "examples/otel_agent.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    rng = random.Random(seed)
    for i in range(n):
        module.conversation(provider.get_tracer("t"), rng, "x", f"c{i}")
    roots = [s for s in memory.get_finished_spans() if s.name.startswith("invoke_agent")]
    return [
        (s.attributes["monitor.confidence"], s.attributes["monitor.outcome.success"]) for s in roots
    ]


def cli_json(database_url: str, *args: str) -> dict:
    """``monitor <args> --json`` as a process, as a user runs it."""
    env = {**os.environ, "MONITOR_DATABASE_URL": database_url}
    done = subprocess.run(
        [sys.executable, "-m", "monitor.cli", *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout)


async def test_example_script_exports_and_analytics_show_its_agent(
    worker: WorkerProcess, database_url: str
):
    n, seed = 40, 5
    truth = example_plan(n, seed)
    escalated = sum(c < 0.35 for c, _ in truth)
    assert 0 < escalated < n
    await asyncio.to_thread(run_example, worker, "http/protobuf", n, seed)
    total = 5 * n + escalated  # user, assistant, tool_result, answer, outcome (+ escalation)
    assert await wait_for_count(database_url, total, stable_s=1.0) == total

    calibration = await asyncio.to_thread(cli_json, database_url, "calibration")
    report = calibration["agents"]["otel-support-bot"]
    assert report["count"] == n  # one labelled item per conversation: the agent's answer
    assert report["accuracy"] == pytest.approx(sum(ok for _, ok in truth) / n)
    assert report["mean_confidence"] == pytest.approx(sum(c for c, _ in truth) / n)
    escalation = await asyncio.to_thread(cli_json, database_url, "escalation")
    agent = escalation["agents"]["otel-support-bot"]
    assert agent["conversations"] == n
    assert agent["escalated"] == escalated

    # the same script again over OTLP/JSON: same seed, same ids, nothing new stored
    await asyncio.to_thread(run_example, worker, "http/json", n, seed)
    for _ in range(200):
        if labelled(worker, "monitor_otlp_spans_total", "mapped") >= 2 * 3 * n:
            break
        await asyncio.sleep(0.1)
    assert labelled(worker, "monitor_otlp_spans_total", "mapped") == 2 * 3 * n
    await asyncio.sleep(2.0)
    assert await count(database_url) == total


def chat_span_json(span_id: str, confidence: float = 0.8) -> dict[str, Any]:
    """An LLM span in OTLP/JSON: ``chat m`` of one fixed trace, stating ``confidence``, with
    its answer on the span (a span without content would wait for its GenAI log records)."""
    answer = [{"role": "assistant", "parts": [{"type": "text", "content": "It shipped."}]}]
    return {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": span_id,
        "name": "chat m",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "monitor.confidence", "value": {"doubleValue": confidence}},
            {"key": "gen_ai.output.messages", "value": {"stringValue": json.dumps(answer)}},
        ],
    }


async def test_http_answers_follow_otlp(worker: WorkerProcess, database_url: str):
    url = f"{worker.url}/v1/traces"
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-protobuf"}
    good = chat_span_json("eee19b7ec3c1b174")
    bad_conf = chat_span_json("eee19b7ec3c1b175", confidence=1.7)
    short_id = {**good, "spanId": "eee19b"}
    useless = {**good, "spanId": "eee19b7ec3c1b176", "name": "SELECT", "attributes": []}
    body = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]
                },
                "scopeSpans": [{"spans": [good, bad_conf, short_id, useless]}],
            }
        ]
    }
    async with httpx.AsyncClient(timeout=30) as client:
        r = await client.post(url, content=b"\x0a\x00", headers={**auth, "Authorization": "x"})
        assert r.status_code == 401
        status = status_pb2.Status()
        status.ParseFromString(r.content)
        assert status.code == 16 and "bearer" in status.message
        r = await client.post(url, content=b"{}", headers={**auth, "Content-Type": "text/plain"})
        assert r.status_code == 415
        r = await client.post(url, content=b"\xff\xff\xff", headers=auth)
        assert r.status_code == 400
        r = await client.post(
            url,
            content=gzip.compress(json.dumps(body).encode()),
            headers={**auth, "Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
        assert r.status_code == 200, r.text
        answer = r.json()["partialSuccess"]
        assert answer["rejectedSpans"] == "2"
        assert "out_of_range" in answer["errorMessage"] and "span_id" in answer["errorMessage"]
        # the same through protobuf: the answer is an ExportTraceServiceResponse
        request = ExportTraceServiceRequest()
        request.ParseFromString(_proto_of(body))
        r = await client.post(url, content=request.SerializeToString(), headers=auth)
        assert r.status_code == 200
        response = ExportTraceServiceResponse()
        response.ParseFromString(r.content)
        assert response.partial_success.rejected_spans == 2
        # above aiohttp's 1 MiB default, below the configured 8 MiB: read, not a plain-text 413
        pad = {"key": "padding", "value": {"stringValue": "p" * 1_500_000}}
        big = {**useless, "spanId": "eee19b7ec3c1b177", "attributes": [pad]}
        request = ExportTraceServiceRequest()
        request.ParseFromString(_proto_of({"resourceSpans": [{"scopeSpans": [{"spans": [big]}]}]}))
        r = await client.post(url, content=request.SerializeToString(), headers=auth)
        assert r.status_code == 200, r.content[:200]
        over = b"\x0a" + b"\x00" * (8 * 1024 * 1024)  # no Content-Length: streamed, then cut

        async def streamed():  # chunked: the size is only known while reading
            yield over

        r = await client.post(url, content=streamed(), headers=auth)
        assert r.status_code == 413
        status = status_pb2.Status()
        status.ParseFromString(r.content)
        assert "body over" in status.message
    assert await wait_for_count(database_url, 1, stable_s=1.0) == 1
    assert labelled(worker, "monitor_otlp_spans_total", "dropped") == 3


def _proto_of(body: dict) -> bytes:
    """The OTLP/JSON ``body`` as protobuf (ids hex -> bytes, per the OTLP JSON rules)."""
    data = copy.deepcopy(body)
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId"):
                    span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    message = ExportTraceServiceRequest()
    json_format.ParseDict(data, message)
    return message.SerializeToString()


async def test_agent_traces_topic_consumed_like_the_endpoint(
    broker, topic_name: str, database_url: str, tmp_path: Path
):
    """OTLP protobuf records on the traces topic (as the Collector's kafka exporter writes
    them) become the same events; a record that is not OTLP is skipped, and so is a record
    batch the consumer cannot decode (the records after it are read)."""
    from aiokafka import AIOKafkaProducer
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from tests.kafka_raw import Raw, record_batch
    from tests.otel.agents import collecting

    traces_topic = f"{topic_name}.otlp"
    await create_topic(broker.bootstrap, topic_name)
    await create_topics(broker.bootstrap, (traces_topic, 2))
    with collecting("kafka-agent") as (provider, memory):
        tracer = provider.get_tracer("t")
        for i in range(4):
            with tracer.start_as_current_span(
                "chat",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.conversation.id": f"k-{i}",
                    "monitor.confidence": 0.5,
                },
            ):
                pass
        spans = list(memory.get_finished_spans())
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(traces_topic, b"not an otlp request \xff", partition=0)
        first = encode_spans(spans[:2]).SerializeToString()
        await producer.send_and_wait(traces_topic, first, partition=0)
        async with Raw(broker.bootstrap, traces_topic) as raw:  # corrupt, between good records
            await raw.produce(record_batch([first], "zstd", "payload"), partition=0)
        second = encode_spans(spans[2:]).SerializeToString()
        await producer.send_and_wait(traces_topic, second, partition=0)
    finally:
        await producer.stop()
    w = WorkerProcess(
        broker.bootstrap,
        database_url,
        topic_name,
        tmp_path,
        MONITOR_TOPIC_TRACES=traces_topic,
        MONITOR_JUDGE_ENABLED="false",
        MONITOR_ALERTING_ENABLED="false",
    ).start()
    try:
        await w.wait_ready()
        assert await wait_for_count(database_url, 4, stable_s=1.0) == 4
        convs = await rows(
            database_url,
            "SELECT conversation_id, agent_id, confidence FROM events ORDER BY conversation_id",
        )
        assert [(r["conversation_id"], r["agent_id"], r["confidence"]) for r in convs] == [
            (f"k-{i}", "kafka-agent", 0.5) for i in range(4)
        ]
        assert labelled(w, "monitor_otlp_spans_total", "bad_record") == 1
        assert labelled(w, "monitor_otlp_spans_total", "bad_batch") == 1
        assert labelled(w, "monitor_otlp_spans_total", "mapped") == 4
    finally:
        w.stop()
