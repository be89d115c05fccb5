"""The alert store on real Postgres (compare-and-swap, silences, acks, grouping state, history)
and the ``monitor alerts`` CLI (list, silence, silences, unsilence, ack, rules)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from monitor.alerts import repo
from monitor.alerts.grouping import Group
from monitor.alerts.incidents import Incident, Member, incident_id
from monitor.alerts.silences import Ack, Matcher, Silence
from monitor.alerts.states import AlertState, Kind, Notification, Status
from monitor.cli.main import app
from monitor.store.engine import make_engine

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SCOPE = {"agent": "billing", "tier": "3"}
T = TypeVar("T")


def firing(rule: str = "ece_tier3", scope: dict[str, str] = SCOPE, version: int = 3) -> AlertState:
    base = AlertState.new(rule, scope)
    return replace(
        base,
        status=Status.FIRING,
        active_since=T0,
        fired_at=T0 + timedelta(minutes=10),
        notified=1,
        last_notified_at=T0 + timedelta(minutes=10),
        last_value=0.123,
        last_samples=512.0,
        last_observed_at=T0 + timedelta(minutes=10),
        version=version,
    )


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(database_url)
    yield eng
    await eng.dispose()


async def test_save_state_is_compare_and_swap(engine: AsyncEngine) -> None:
    s = firing(version=1)
    async with engine.begin() as conn:
        assert await repo.save_state(conn, s, None) is True
        assert await repo.save_state(conn, s, None) is False  # a concurrent creator won
        v2 = replace(s, last_value=0.2, version=2)
        assert await repo.save_state(conn, v2, 1) is True
        assert await repo.save_state(conn, replace(s, version=2), 1) is False  # stale read
        with pytest.raises(ValueError):
            await repo.save_state(conn, v2, 2)
        got = await repo.load_states(conn, [s.fingerprint])
    assert got == {s.fingerprint: v2}
    async with engine.connect() as conn:
        row = (await conn.execute(text("SELECT status, version, scope FROM alert_states"))).one()
    assert tuple(row) == ("firing", 2, SCOPE)


async def test_concurrent_cas_has_one_winner(engine: AsyncEngine) -> None:
    s = firing(version=1)
    async with engine.begin() as conn:
        await repo.save_state(conn, s, None)

    async def writer(value: float) -> bool:
        async with engine.begin() as conn:
            ok = await repo.save_state(conn, replace(s, last_value=value, version=2), 1)
            await asyncio.sleep(0.2)  # hold the row lock while the other waits
            return ok

    results = await asyncio.gather(writer(0.5), writer(0.6))
    assert sorted(results) == [False, True]


async def test_silences_crud(engine: AsyncEngine) -> None:
    s = Silence(
        "abc", (Matcher("alertname", "ece_*"),), T0, T0 + timedelta(hours=2), "deploy", "me"
    )
    hour = timedelta(hours=1)
    later = Silence("def", (Matcher("agent", "x"),), T0 + hour, T0 + 3 * hour, "r", "me")
    async with engine.begin() as conn:
        await repo.create_silence(conn, s)
        await repo.create_silence(conn, later)
    async with engine.begin() as conn:
        assert await repo.active_silences(conn, T0 + timedelta(minutes=5)) == [s]
        assert await repo.list_silences(conn, T0 + timedelta(minutes=5)) == [s, later]
        ended = await repo.expire_silence(conn, "abc", T0 + timedelta(minutes=30))
        assert ended.ends_at == T0 + timedelta(minutes=30)
        assert await repo.active_silences(conn, T0 + timedelta(minutes=31)) == []
        assert [x.id for x in await repo.list_silences(conn, T0, include_ended=True)] == [
            "abc",
            "def",
        ]
        with pytest.raises(LookupError):
            await repo.expire_silence(conn, "nope", T0)


async def test_ack_updates_state_and_history(engine: AsyncEngine) -> None:
    s = firing()
    pending = replace(AlertState.new("other", SCOPE), status=Status.PENDING, version=1)
    async with engine.begin() as conn:
        await repo.save_state(conn, s, None)
        await repo.save_state(conn, pending, None)
    async with engine.begin() as conn:
        acked = await repo.ack(conn, Ack(s.fingerprint, "alice", T0, "on it"), "critical")
    assert (acked.acked_by, acked.version) == ("alice", s.version + 1)
    async with engine.begin() as conn:
        assert (await repo.load_states(conn, [s.fingerprint]))[s.fingerprint] == acked
        hist = await repo.history(conn, s.fingerprint)
        assert [(h["kind"], h["summary"]) for h in hist] == [
            ("ack", "acknowledged by alice: on it")
        ]
        with pytest.raises(ValueError, match="not firing"):
            await repo.ack(conn, Ack(pending.fingerprint, "bob", T0))
    async with engine.begin() as conn:
        with pytest.raises(LookupError):
            await repo.ack(conn, Ack("0" * 16, "bob", T0))
        assert (await repo.find_state(conn, s.fingerprint[:6])).fingerprint == s.fingerprint


def note(kind: Kind, fp: str = "f1", seq: int = 0) -> Notification:
    return Notification(
        idempotency_key=f"{fp}:{T0.isoformat()}:{kind.value}:{seq}",
        kind=kind,
        sequence=seq,
        fingerprint=fp,
        rule="r",
        metric="ece",
        severity="critical",
        scope=SCOPE,
        labels={"alertname": "r", "severity": "critical", **SCOPE},
        summary="s",
        description="",
        runbook_url=None,
        value=0.2,
        threshold=0.1,
        comparison=">",
        samples=300,
        window="1h",
        fired_at=T0,
        resolved_at=None,
        created_at=T0,
    )


async def test_groups_and_history_roundtrip(engine: AsyncEngine) -> None:
    g1 = Group("severity=critical", {"severity": "critical"}, (note(Kind.FIRING),), T0, None)
    g2 = Group("severity=info", {"severity": "info"}, (), None, T0)
    async with engine.begin() as conn:
        await repo.save_groups(conn, {}, {g1.key: g1, g2.key: g2})
    async with engine.begin() as conn:
        loaded = await repo.load_groups(conn, lock=True)
        assert loaded == {g1.key: g1, g2.key: g2}
        await repo.save_groups(conn, loaded, {g1.key: replace(g1, pending=())})
    async with engine.begin() as conn:
        assert list(await repo.load_groups(conn)) == [g1.key]
        assert await repo.record_history(conn, [note(Kind.FIRING), note(Kind.REPEAT, seq=1)]) == 2
        assert await repo.record_history(conn, [note(Kind.FIRING)]) == 0  # idempotent
        assert [h["kind"] for h in await repo.history(conn)] == ["firing", "repeat"]


# --- CLI -------------------------------------------------------------------------------------


def run(fn: Callable[[AsyncEngine], Awaitable[T]], url: str) -> T:
    async def go() -> T:
        eng = make_engine(url)
        try:
            return await fn(eng)
        finally:
            await eng.dispose()

    return asyncio.run(go())


def cli(url: str, *args: str, code: int = 0, **env: str) -> Any:
    result = CliRunner().invoke(app, ["alerts", *args], env={"MONITOR_DATABASE_URL": url, **env})
    assert result.exit_code == code, result.output
    return result


def seed_states(url: str, *states: AlertState) -> None:
    async def go(eng: AsyncEngine) -> None:
        async with eng.begin() as conn:
            for s in states:
                await repo.save_state(conn, s, None)

    run(go, url)


def incident(key: str, opened: float, resolved: float | None, version: int = 0) -> Incident:
    at = T0 + timedelta(minutes=opened)
    end = None if resolved is None else T0 + timedelta(minutes=resolved)
    fp = AlertState.new("ece_tier3", {"agent": key}).fingerprint
    member = Member(fp, "ece_tier3", "critical", at)
    return Incident(
        incident_id(f"agent={key}", at),
        f"agent={key}",
        {"agent": key},
        at,
        "critical",
        "critical",
        (member,),
        () if end else (fp,),
        end,
        version=version,
    )


async def test_incidents_are_stored_and_the_live_ones_loaded(engine: AsyncEngine) -> None:
    """Open incidents and those resolved within the window are live; an update replaces the
    row (state and the columns the dashboards read)."""
    still = incident("billing", 0, None)
    recent = incident("support", 5, 50)
    old = incident("search", 2, 20)
    async with engine.begin() as conn:
        await repo.save_incidents(conn, [still, recent, old])
        live = await repo.load_live_incidents(
            conn, T0 + timedelta(minutes=60), timedelta(minutes=30)
        )
        assert sorted(i.id for i in live) == sorted([still.id, recent.id])
        assert {i.id: i for i in live}[still.id] == still  # JSON round trip
        closed = replace(still, resolved_at=T0 + timedelta(minutes=70), firing=(), version=1)
        await repo.save_incidents(conn, [closed])
        assert [i.id for i in await repo.list_incidents(conn)] == []
        listed = await repo.list_incidents(conn, include_resolved=True)
        assert [i.id for i in listed] == [recent.id, old.id, still.id]  # newest first
        row = (
            await conn.execute(
                text(
                    "SELECT status, resolved_at, members, pages, version FROM alert_incidents"
                    " WHERE id = :id"
                ),
                {"id": still.id},
            )
        ).one()
    assert tuple(row) == (
        "resolved",
        T0 + timedelta(minutes=70),
        [still.members[0].fingerprint],
        1,
        1,
    )


def test_cli_list_silence_unsilence_ack(database_url: str) -> None:
    url = database_url
    fire = firing()
    resolved = replace(
        firing("ece_tier2", {"agent": "shop", "tier": "2"}),
        status=Status.RESOLVED,
        resolved_at=T0 + timedelta(hours=1),
    )
    seed_states(url, fire, resolved)
    out = json.loads(cli(url, "list", "--json").output)["alerts"]
    assert [a["fingerprint"] for a in out] == [fire.fingerprint]
    a = out[0]
    assert (a["status"], a["value"], a["threshold"], a["comparison"]) == (
        "firing",
        0.123,
        0.05,
        ">",
    )
    assert (a["severity"], a["silenced"], a["acked_by"]) == ("critical", False, None)
    assert a["since"] == fire.fired_at.isoformat()  # type: ignore[union-attr]
    everything = json.loads(cli(url, "list", "--all", "--json").output)["alerts"]
    assert [x["status"] for x in everything] == ["firing", "resolved"]
    assert "ece_tier3" in cli(url, "list").output
    # silence: required reason, --by from $USER, matched in list
    cli(url, "silence", "alertname=ece_*,agent=billing", "--for", "2h", code=2, USER="carol")
    made = json.loads(
        cli(
            url,
            "silence",
            "alertname=ece_*,agent=billing",
            "--for",
            "2h",
            "--reason",
            "deploy",
            "--json",
            USER="carol",
        ).output
    )
    assert made["created_by"] == "carol" and made["reason"] == "deploy"
    assert made["matchers"] == [
        {"label": "alertname", "pattern": "ece_*"},
        {"label": "agent", "pattern": "billing"},
    ]
    a = json.loads(cli(url, "list", "--json").output)["alerts"][0]
    assert a["silenced"] is True and a["silence_id"] == made["id"]
    listed = json.loads(cli(url, "silences", "--json").output)["silences"]
    assert [s["id"] for s in listed] == [made["id"]]
    assert "ended" in cli(url, "unsilence", made["id"]).output
    assert json.loads(cli(url, "list", "--json").output)["alerts"][0]["silenced"] is False
    assert json.loads(cli(url, "silences", "--json").output)["silences"] == []
    assert "no silence with id 'nope'\n" in cli(url, "unsilence", "nope", code=1).output
    cli(url, "silence", "agent", "--for", "1h", "--reason", "x", "--by", "me", code=2)
    cli(url, "silence", "agent=x", "--reason", "x", "--by", "me", code=2)  # no --for/--until
    # ack by fingerprint prefix
    out = cli(url, "ack", fire.fingerprint[:8], "--by", "dave", "--comment", "rolling back").output
    assert "acknowledged" in out and "dave" in out
    a = json.loads(cli(url, "list", "--json").output)["alerts"][0]
    assert a["acked_by"] == "dave"
    assert "not firing" in cli(url, "ack", resolved.fingerprint, "--by", "x", code=1).output
    unknown = cli(url, "ack", "ffffffff", "--by", "x", code=1).output
    assert "no alert matches 'ffffffff'\n" in unknown


def test_cli_list_names_the_destinations_or_says_there_is_none(database_url: str) -> None:
    seed_states(database_url, firing())
    bare = cli(database_url, "list")
    assert "no destination: alerts are evaluated and recorded but nobody is notified" in " ".join(
        bare.output.split()
    )
    assert json.loads(cli(database_url, "list", "--json").output)["destinations"] == []
    hooks = {"MONITOR_WEBHOOK_URL": "http://127.0.0.1:9/hook", "MONITOR_SLACK_WEBHOOK_URL": "x"}
    out = cli(database_url, "list", **hooks).output
    assert "destinations: slack, webhook" in out and "no destination" not in out
    listed = json.loads(cli(database_url, "list", "--json", **hooks).output)["destinations"]
    assert listed == ["slack", "webhook"]


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"slack_webhook_url": "http://h/s"},
        {"slack_bot_token": "xoxb-1", "slack_channel": "C"},
        {"webhook_url": "http://h/w", "alertmanager_url": "http://h/am"},
        {
            "slack_bot_token": "xoxb-1",
            "slack_channel": "C",
            "slack_webhook_url": "http://h/s",
            "webhook_url": "http://h/w",
            "alertmanager_url": "http://h/am",
        },
    ],
)
async def test_destinations_name_exactly_the_sinks_the_worker_builds(env: dict[str, str]) -> None:
    from monitor.alerts.destinations import destinations
    from monitor.alerts.sinks.registry import configured_sinks
    from monitor.config import Settings

    settings = Settings(**env)  # type: ignore[arg-type]
    sinks = configured_sinks(settings)
    try:
        assert destinations(settings) == list(sinks)
    finally:
        for sink in sinks.values():
            await sink.aclose()


def test_cli_rules_validates_files(database_url: str, tmp_path: Path) -> None:
    default = json.loads(cli(database_url, "rules", "--json").output)
    assert default["source"] == "built-in default rules"
    assert "ece_tier3" in {r["name"] for r in default["rules"]}
    assert "drift_tier3" in cli(database_url, "rules").output
    bad = tmp_path / "alerts.yaml"
    bad.write_text(
        "rules:\n  - name: x\n    metric: ece\n    comparison: '>'\n    threshold: high\n"
        "    window: 1h\n    severity: critical\n    annotations: {summary: s}\n"
    )
    res = cli(database_url, "rules", "--file", str(bad), code=2)
    assert f"{bad}:5: rules[0].threshold:" in res.output
    res = cli(database_url, "rules", code=2, MONITOR_ALERT_RULES_FILE=str(bad))  # from settings
    assert f"{bad}:5: rules[0].threshold:" in res.output
    good = tmp_path / "ok.yaml"
    good.write_text(bad.read_text().replace("high", "0.1"))
    out = json.loads(
        cli(database_url, "rules", "--json", MONITOR_ALERT_RULES_FILE=str(good)).output
    )
    assert out["source"] == str(good) and [r["name"] for r in out["rules"]] == ["x"]
    assert (
        "cannot read" in cli(database_url, "rules", "--file", str(tmp_path / "no"), code=2).output
    )
