"""The Conversation dashboard one click from every conversation column, on a seeded Postgres.

- Every table panel of every other dashboard that shows a conversation column links it to the
  Conversation dashboard: the link is parsed as a URL, it names that dashboard's uid and its
  ``conversation`` variable, and following it (the value put in as Grafana does, percent
  encoded) gives the Conversation dashboard's panels the conversation's rows: its roll-up, as
  many transcript rows as it has stored events, its verdicts, its gate decisions.
- The dashboard shows a conversation full of secrets redacted (``monitor_redact``), and
  ``monitor_redact`` redacts exactly as ``monitor.core.redact.redact`` on a corpus.
"""

from __future__ import annotations

import json
import random
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import asyncpg
import pytest

from monitor.core.redact import redact
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.store.engine import libpq_url
from tests.dashboards import grafana_sql as g
from tests.dashboards.test_dashboard_sql import (
    Result,
    Scenario,
    resolve_variables,
    run_sql,
    seeded_connection,
    seeded_scenarios,
)
from tests.factories import SECRET_ID, SECRETS, secret_events
from tests.test_deploy_files import all_panels, dashboard_files

UID = "monitor-conversation"
VARIABLE = "conversation"


def boards() -> dict[str, dict[str, Any]]:
    return {d["uid"]: d for d in (json.loads(p.read_text()) for p in dashboard_files())}


def field_links(panel: dict[str, Any]) -> dict[str, list[str]]:
    """field name -> the URLs of the data links on it (overrides by name)."""
    out: dict[str, list[str]] = {}
    for o in panel.get("fieldConfig", {}).get("overrides", []):
        if o["matcher"].get("id") == "byName":
            for prop in o["properties"]:
                if prop["id"] == "links":
                    out.setdefault(o["matcher"]["options"], []).extend(
                        link["url"] for link in prop["value"]
                    )
    return out


def follow(url: str, value: str) -> tuple[str, dict[str, list[str]]]:
    """The dashboard uid and the query a click on ``value`` opens (``${__value.raw}`` put in
    percent-encoded, Grafana's default for data links)."""
    parts = urlsplit(url.replace("${__value.raw}", quote(value, safe="")))
    segments = parts.path.strip("/").split("/")
    assert segments[0] == "d" and len(segments) >= 2, url
    return segments[1], parse_qs(parts.query)


async def panel_results(
    conn: asyncpg.Connection, board: dict[str, Any], scenario: Scenario
) -> dict[str, Result]:
    """Each panel's first target, run under ``scenario`` (title -> result)."""
    problems: list[str] = []
    variables = await resolve_variables(conn, board, scenario, problems)
    assert not problems, problems
    out = {}
    for panel in all_panels(board):
        if panel.get("targets"):
            sql = g.interpolate(
                panel["targets"][0]["rawSql"],
                time_range=scenario.time_range,
                interval_ms=60000,
                variables=variables,
            )
            out[panel["title"]] = await run_sql(conn, sql)
    return out


async def conversation_columns(conn: asyncpg.Connection, result: Result) -> list[str]:
    """The text columns of ``result`` whose every value is a stored conversation's id."""
    out = []
    for i, (column, kind) in enumerate(zip(result.columns, result.types, strict=True)):
        values = list({str(r[i]) for r in result.rows if r[i] is not None})
        if kind in ("text", "varchar") and values:
            known = await conn.fetchval(
                "SELECT count(*) FROM conversations WHERE conversation_id = ANY($1::text[])",
                values,
            )
            if known == len(values):
                out.append(column)
    return out


def rows(result: Result) -> list[dict[str, Any]]:
    return [dict(zip(result.columns, r, strict=True)) for r in result.rows]


async def test_every_conversation_column_links_to_its_transcript(
    seeded_dashboard_url: str,
) -> None:
    target = boards()[UID]
    assert [v["name"] for v in target["templating"]["list"]] == [VARIABLE]
    followed = 0
    async with seeded_connection(seeded_dashboard_url) as conn:
        for uid, board in boards().items():
            if uid == UID:
                continue
            scenario = next(s for s in await seeded_scenarios(conn, board) if "history" in s.name)
            for title, result in (await panel_results(conn, board, scenario)).items():
                panel = next(p for p in all_panels(board) if p["title"] == title)
                shown = await conversation_columns(conn, result)
                links = field_links(panel)
                for column in shown:
                    assert links.get(column), f"{uid} / {title}: {column!r} links nowhere"
                    values = [r[column] for r in rows(result) if r[column] is not None][:3]
                    assert values, f"{uid} / {title}: no conversation to follow"
                    for url in links[column]:
                        for value in values:
                            opened, query = follow(url, value)
                            assert opened == UID, url
                            assert query[f"var-{VARIABLE}"] == [value], url
                            await check_target(conn, target, value)
                            followed += 1
    assert followed >= 5 * 3  # five panels link (Missed escalations, four Examples)


async def check_target(conn: asyncpg.Connection, board: dict[str, Any], cid: str) -> None:
    """The Conversation dashboard's panels with ``conversation`` = ``cid`` show its rows."""
    now = await conn.fetchval("SELECT clock_timestamp()")
    scenario = Scenario("link", g.TimeRange(now - timedelta(hours=6), now), {VARIABLE: (cid,)})
    got = await panel_results(conn, board, scenario)
    (head,) = rows(got["Conversation"])
    assert head["conversation"] == cid
    (sample,) = rows(got["Sample decision"])
    assert sample["sample"] in ("kept", "unsampled", "not decided")
    events = await conn.fetchval("SELECT count(*) FROM events WHERE conversation_id = $1", cid)
    assert events > 0 and len(got["Transcript"].rows) == events == sample["stored events"]
    verdicts = await conn.fetchval("SELECT count(*) FROM verdicts WHERE conversation_id = $1", cid)
    assert len(got["Verdicts"].rows) == verdicts
    gates = await conn.fetchval(
        "SELECT count(*) FROM events WHERE conversation_id = $1 AND type = 'gate'", cid
    )
    assert len(got["Gate decisions"].rows) == gates


async def test_the_dashboard_shows_secrets_redacted(seeded_dashboard_url: str) -> None:
    writer = EventWriter(seeded_dashboard_url)
    try:
        await writer.write([event_row(e) for e in secret_events()])
    finally:
        await writer.close()
    async with seeded_connection(seeded_dashboard_url) as conn:
        await conn.execute(
            "INSERT INTO verdicts (conversation_id, item_id, agent_id, judge, judge_version,"
            " status, label, score, categories, evidence, rationale, error)"
            " VALUES ($1, 's1', 'support-bot', 'llm-rubric', 'v1', 'ok', 0, 0.1,"
            " '[\"fabrication\"]', $2::jsonb, $3, NULL)",
            SECRET_ID,
            json.dumps({"quote": "password=hunter2", "card": 4111111111111111}),
            "it echoed the card 4111 1111 1111 1111 back to jane.doe@example.com",
        )
        now = await conn.fetchval("SELECT clock_timestamp()")
        scenario = Scenario(
            "secrets", g.TimeRange(now - timedelta(hours=1), now), {VARIABLE: (SECRET_ID,)}
        )
        got = await panel_results(conn, boards()[UID], scenario)
    shown = json.dumps({t: r.rows for t, r in got.items()}, default=str)
    for secret in SECRETS:
        assert secret not in shown, secret
    text = "\n".join(str(r["text"]) for r in rows(got["Transcript"]))
    for mark in ("[secret]", "[card]", "[email]", "[phone]"):
        assert mark in text, mark
    assert "-> charge(" in text and "escalated (trigger policy, turn 3)" in text
    (verdict,) = rows(got["Verdicts"])
    assert verdict["turn"] == 1 and verdict["categories"] == "fabrication"
    assert verdict["rationale"] == "it echoed the card [card] back to [email]"
    assert "password=[secret]" in verdict["evidence"] and "[card]" in verdict["evidence"]


TOKENS = (
    "4111 1111 1111 1111",
    "4111111111111111",
    "4111-1111-1111-1111",
    "378282246310005",
    "4111111111111112",
    "12345678901234567890",
    "jane@example.com",
    "a.b+c@x-y.co.uk",
    "@",
    "a@b.c",
    "+1 (555) 123-4567",
    "+44 20 7946 0958",
    "+12",
    "(555) 123-4567",
    "555.123.4567",
    "555-123-4567",
    "555-1234",
    "password=hunter2",
    "Password: x",
    "token=",
    "api_key:abc",
    "API-KEY = zz",
    '"secret": "v"',
    "'token':'q'",
    "xoxb-1234567890ab",
    "Bearer abcdefghijklmnopqrstu",
    "sk-abcdefghijklmnopqrstuvwxyz",
    "AKIAABCDEFGHIJKLMNOP",
    " ",
    ", ",
    ". ",
    "-",
    "(",
    ")",
    "x",
    "12",
    ".5",
    "+",
    "9",
    ",1",
    "_",
    "\n",
)


@pytest.mark.parametrize("seed", range(3))
async def test_sql_redaction_equals_the_python_one(database_url: str, seed: int) -> None:
    """``monitor_redact`` and ``redact`` agree on 1,000 strings made of the patterns' edge
    cases (cards passing and failing Luhn, digit runs, emails, phones, keys, tokens) glued
    together in random order."""
    rnd = random.Random(seed)
    corpus = ["".join(rnd.choice(TOKENS) for _ in range(rnd.randint(1, 8))) for _ in range(1000)]
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        got = await conn.fetchval(
            "SELECT array_agg(monitor_redact(t) ORDER BY i)"
            " FROM unnest($1::text[]) WITH ORDINALITY AS u(t, i)",
            corpus,
        )
    finally:
        await conn.close()
    mismatched = [(t, s, redact(t)) for t, s in zip(corpus, got, strict=True) if s != redact(t)]
    assert not mismatched, mismatched[:5]
    assert sum(t != redact(t) for t in corpus) > 500  # most strings had something to redact
