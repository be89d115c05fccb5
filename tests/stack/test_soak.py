"""``bench/soak.py``: its verdict over samples (pure), the error lines it counts, and a short
run on the real embedded stack whose samples file holds every column and whose load ran."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bench.soak import (
    COLUMNS,
    POSTGRES_ERROR,
    PYTHON_ERROR,
    TANSU_ERROR,
    Counts,
    ErrorLines,
    checks,
    missing_lines,
    parse_args,
    proofs,
    trace_missing,
)
from monitor.config import Settings
from monitor.sdk import EventEmitter
from monitor.sim.traffic import Simulator
from monitor.stack.broker import EmbeddedBroker
from monitor.store.engine import libpq_url
from tests.servers.worker import create_topic

REPO = Path(__file__).resolve().parents[2]
BOUNDS: dict[str, Any] = {
    "rss_slope_mib_h": 10.0,
    "broker_kib_per_record": 2.0,
    "lag_slope_per_h": 3600.0,
    "retention_failed": 0,
}


def samples(minutes: int = 60, **per_hour: float) -> list[dict[str, Any]]:
    """A sample a minute over ``minutes``; every figure flat unless ``per_hour`` names its
    column with a growth per hour."""
    base = {
        "worker_rss_mib": 200.0,
        "gate_rss_mib": 100.0,
        "postgres_pss_mib": 150.0,
        "broker_rss_mib": 50.0,
        "broker_records": 0.0,
        "consumer_lag": 20.0,
        "error_lines": 0,
    }
    return [
        {"t_s": m * 60.0, **{k: v + per_hour.get(k, 0.0) * m / 60 for k, v in base.items()}}
        for m in range(minutes + 1)
    ]


def failed(rows: list[dict[str, Any]], **bounds: Any) -> list[str]:
    return [c.name for c in checks(rows, **{**BOUNDS, **bounds}) if not c.ok]


def test_flat_memory_and_lag_pass() -> None:
    assert failed(samples()) == []
    assert failed(samples(worker_rss_mib=9.0, consumer_lag=3000.0)) == []


def test_memory_growing_beyond_the_bound_fails_per_process() -> None:
    assert failed(samples(worker_rss_mib=12.0)) == ["worker RSS slope"]
    assert failed(samples(gate_rss_mib=30.0, postgres_pss_mib=11.0)) == [
        "gate RSS slope",
        "postgres PSS slope",
    ]


def test_growth_in_the_first_half_only_is_warm_up() -> None:
    rows = samples(worker_rss_mib=500.0)
    for row in rows[30:]:  # flat from the middle on
        row["worker_rss_mib"] = rows[30]["worker_rss_mib"]
    assert failed(rows) == []


def test_the_broker_may_grow_with_the_records_it_holds_and_no_more() -> None:
    # 360,000 records an hour at 2 KiB each: 703 MiB/h allowed beside the 10
    holding = samples(broker_records=360_000.0, broker_rss_mib=700.0)
    assert failed(holding) == []
    assert failed(samples(broker_records=360_000.0, broker_rss_mib=720.0)) == ["broker RSS slope"]
    assert failed(samples(broker_rss_mib=20.0)) == ["broker RSS slope"]


def test_growing_lag_and_error_lines_fail() -> None:
    assert failed(samples(consumer_lag=4000.0)) == ["consumer lag slope"]
    rows = samples()
    rows[-1]["error_lines"] = 1
    assert failed(rows) == ["error log lines"]
    assert failed(samples(), retention_failed=1) == ["retention runs with a failed step"]


def test_too_few_samples_to_fit_fail_rather_than_pass() -> None:
    names = failed(samples(minutes=2))
    assert "worker RSS slope" in names and "consumer lag slope" not in names


def proof_args(**over: Any) -> argparse.Namespace:
    args = parse_args(["--minutes", "10"])
    return argparse.Namespace(**{**vars(args), **over})


def test_the_load_is_proven_only_when_everything_sent_was_stored_at_its_rate() -> None:
    n = Counts(
        kafka_sent=48_000,
        http_posted=12_000,
        http_accepted=12_000,
        otlp_requests=600,
        otlp_conversations=600,
        otlp_spans=1800,
        otlp_expected_events=3300,
        gate_calls=3000,
        gate_answered=3000,
        gate_decisions=3000,
    )
    metrics = {"monitor_judged_conversations_total": 500.0, "sum:monitor_retention_runs_total": 11}
    stored = (48_000, 12_000, 3300, 3000, 66_300)
    ok = proofs(n, stored, metrics, proof_args(), 600.0, [0.05, 0.1])
    assert [c.name for c in ok if not c.ok] == []
    lost = proofs(n, (47_999, *stored[1:]), metrics, proof_args(), 600.0, [0.05])
    assert [c.name for c in lost if not c.ok] == ["kafka events stored"]
    slow = proofs(n, stored, metrics, proof_args(rate=120.0), 600.0, [0.05])
    assert [c.name for c in slow if not c.ok] == ["kafka rate"]
    busy = proofs(n, stored, metrics, proof_args(), 600.0, [0.2, 1.4])
    assert [c.name for c in busy if not c.ok] == ["machine quiet"]
    failing_open = dataclasses.replace(n, gate_no_event=1, gate_decisions=2999)
    no_event = proofs(failing_open, (*stored[:3], 2999, 66_299), metrics, proof_args(), 600.0, [0])
    assert [c.name for c in no_event if not c.ok] == ["gate calls answered"]
    unjudged = proofs(
        n, stored, {**metrics, "monitor_judged_conversations_total": 0}, proof_args(), 600.0, [0.0]
    )
    assert [c.name for c in unjudged if not c.ok] == ["judges judged"]


async def test_the_missing_ids_are_traced_to_the_dead_letters_the_topic_or_nowhere(
    broker: EmbeddedBroker, topic_name: str, database_url: str
) -> None:
    """Of four Kafka events acknowledged, one stored, one dead-lettered, one in the topic below
    the worker's committed offset (skipped) and one nowhere: the trace says which is where."""
    import asyncpg
    from aiokafka import AIOKafkaConsumer, TopicPartition

    events = list(Simulator(3, datetime.now(UTC) - timedelta(minutes=5)).events(2))[:4]
    stored, dead, skipped, lost = events
    await create_topic(broker.bootstrap, topic_name)
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        topic_events=topic_name,
        consumer_group=f"{topic_name}-ingest",
    )
    async with EventEmitter(broker.bootstrap, topic_name, idempotent=False) as emitter:
        await emitter.send(skipped)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=settings.consumer_group,
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic_name, p) for p in range(4)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.commit({tp: end for tp, end in ends.items() if end})  # read past it
    finally:
        await consumer.stop()
    db = await asyncpg.connect(libpq_url(database_url))
    try:
        await db.execute(
            "INSERT INTO event_ids (event_key, ts, conversation_id) VALUES (md5($1)::uuid, $2, $3)",
            stored.event_id,
            stored.ts,
            stored.conversation_id,
        )
        raw = dead.to_json()
        await db.execute(
            "INSERT INTO dead_letters (source, reason, detail, raw, raw_md5) "
            "VALUES ('t', 'store_rejected', 'x', $1::bytea, md5($1::bytea))",
            raw,
        )
        n = Counts(kafka_sent=4, kafka_ids=[e.event_id for e in events])
        traced = await trace_missing(db, broker.bootstrap, settings, n, (4, 0, 0, 0), (1, 0, 0, 0))
    finally:
        await db.close()
    assert list(traced) == ["kafka"]
    kafka = traced["kafka"]
    assert (kafka["ids_known"], kafka["ids_not_found"]) == (4, 3)
    where = {m["event_id"]: m["where"] for m in kafka["missing"]}
    assert where == {
        dead.event_id: "dead_letters",
        skipped.event_id: "topic, below the worker's committed offset: skipped by the consumer",
        lost.event_id: "nowhere",
    }
    assert kafka["missing"][0]["dead_letters"][0]["reason"] == "store_rejected"
    assert any("1 nowhere" in line for line in missing_lines(traced))


def test_error_lines_of_every_log_format_are_counted_and_the_rest_not(tmp_path: Path) -> None:
    logs = {
        "worker": (
            "[2026-12-07 16:47:31,123] [4242] [WARNING] slow batch\n"
            "[2026-12-07 16:47:32,123] [4242] [ERROR] store failed\n"
            "2026-12-07 16:47:33,001 ERROR monitor.alerts delivery failed\n"
            "2026-12-07 16:47:33,002 INFO monitor.x an ERROR in a message is not a level\n",
            PYTHON_ERROR,
        ),
        "broker": (
            "ready in 2ms\n\x1b[2m2026-12-07T16:47:29Z\x1b[0m \x1b[31mERROR\x1b[0m tansu: x\n",
            TANSU_ERROR,
        ),
        "postgres": (
            "2026-12-07 16:47:29.498 UTC [22816] LOG:  starting PostgreSQL 18.6\n"
            "2026-12-07 16:48:00.000 UTC [22900] ERROR:  canceling statement due to lock timeout\n"
            "partial line without its newline ERROR:  ",
            POSTGRES_ERROR,
        ),
    }
    for name, (text, _) in logs.items():
        (tmp_path / f"{name}.log").write_text(text)
    lines = ErrorLines({n: (tmp_path / f"{n}.log", p) for n, (_, p) in logs.items()})
    assert lines.scan() == 4
    assert lines.scan() == 4  # read once
    with (tmp_path / "postgres.log").open("a") as fh:
        fh.write("\n")  # the partial line is complete now
    assert lines.scan() == 5
    assert lines.examples[0].startswith("worker: [2026-12-07 16:47:32,123]")


@pytest.mark.slow
def test_a_short_soak_on_the_real_stack_samples_every_column_and_proves_its_load(
    tmp_path: Path,
) -> None:
    """Half a minute, a sample every 5 s, on the machine as it is (``--allow-busy``): the
    memory and lag slopes of so short a run are warm-up and may fail (exit 1), but the load
    must be proven (not exit 2) and every column sampled."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "MONITOR_DATABASE_URL")}
    proc = subprocess.run(
        [
            sys.executable,
            "bench/soak.py",
            "--minutes",
            "0.5",
            "--sample-s",
            "5",
            "--allow-busy",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    with (out / "samples.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == COLUMNS
    assert len(rows) == 7  # at 0, 5, ... 30 s
    assert all(row[c] != "" for row in rows for c in COLUMNS)
    last = rows[-1]
    assert float(last["kafka_sent"]) > 0 and float(last["gate_answered"]) > 0
    assert float(last["http_accepted"]) > 0 and float(last["otlp_spans"]) > 0
    assert all(float(last[f"{p}_rss_mib"]) > 0 for p in ("worker", "gate", "broker", "postgres"))
    assert float(last["size_events_mib"]) > 0 and float(last["size_conversations_mib"]) > 0
    assert float(last["broker_records"]) >= float(last["kafka_sent"])
    summary = json.loads((out / "samples.json").read_text())
    assert {p["name"]: p["ok"] for p in summary["proofs"] if p["name"] != "machine quiet"} == {
        p["name"]: True for p in summary["proofs"] if p["name"] != "machine quiet"
    }
    assert summary["stored"]["kafka"] == summary["sent"]["kafka_events"] > 0
    assert (out / "soak.png").stat().st_size > 10_000
    assert (out / "logs" / "worker.log").exists()
    verdict = "PASS" if proc.returncode == 0 else "FAIL"
    assert verdict in proc.stdout.splitlines()[-1]
