"""The report's firing-alert table says what each alert's summary says: for every default rule,
an alert fired through the lifecycle and stored as the worker stores it (state, history) on a
real Postgres shows, in the table, the estimate, the bound and the threshold the summary was
rendered from, even after later evaluations moved the state's value (a rule on a lower bound
stays firing while its lower bound falls: the table once showed that later bound, -0.0708,
beside a summary saying "at least 0.1039")."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

from monitor.alerts import repo
from monitor.alerts.lifecycle import Observation, evaluate, render
from monitor.alerts.rule_models import Comparison, Rule
from monitor.alerts.rules import default_rules
from monitor.alerts.states import AlertState, Notification
from monitor.analytics.repo import Segment
from monitor.report.html import ALERT_HEAD, alerts_table
from monitor.report.write import firing_alerts
from monitor.store.engine import make_engine

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
AGENT = "billing-bot"


def scope_for(rule: Rule) -> dict[str, str]:
    """A concrete scope the rule matches (global rules: no agent)."""
    if rule.metric.value in ("dlq_rate", "consumer_lag", "ingest_stall_s"):
        return {}
    scope = {"agent": AGENT}
    if "tier" in rule.scope.model_dump(exclude_none=True):
        scope["tier"] = "3"
    return scope


def breaching(rule: Rule) -> float:
    """A value past the threshold with digits that survive 4 significant figures."""
    t = rule.threshold
    if rule.comparison in (Comparison.GE, Comparison.LE) and t == 1:
        return 1.0
    step = max(abs(t), 1.0) * 0.1373
    return t + step if rule.comparison in (Comparison.GT, Comparison.GE) else t - step


def observe(rule: Rule, at: datetime, value: float, estimate: float | None) -> Observation:
    bounded = rule.estimate == "lower_bound"
    return Observation(
        rule.name,
        scope_for(rule),
        value,
        max(rule.min_samples, 1234.0),
        at,
        resolve_value=value + 0.2 if bounded else None,
        estimate=estimate if bounded else None,
    )


def fire(rule: Rule) -> tuple[AlertState, list[Notification], datetime]:
    """Evaluate the rule until it fires; the state, every notification, the time."""
    value = breaching(rule)
    estimate = value + 0.0987
    state, out, at = None, [], T0
    for _ in range(4):
        state, emitted = evaluate(rule, state, observe(rule, at, value, estimate), at)
        out += emitted
        if state.status.value == "firing":
            return state, out, at
        at += rule.for_
    raise AssertionError(f"{rule.name} did not fire")


def table_rows(page: str) -> list[dict[str, str]]:
    """The alert table's rows as header -> shown text."""
    rows = re.findall(r"<tr>(.*?)</tr>", page, re.S)[1:]  # after the header row
    out = []
    for row in rows:
        cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        out.append(dict(zip(ALERT_HEAD, cells, strict=True)))
    return out


async def test_every_default_rule_table_and_summary_agree(database_url: str) -> None:
    rules = default_rules().rules
    engine = make_engine(database_url)
    fingerprints: dict[str, Rule] = {}
    try:
        for rule in rules:
            state, notes, at = fire(rule)
            assert notes and notes[0].kind.value == "firing", rule.name
            later = state
            if rule.estimate == "lower_bound":
                # the bound falls under the threshold (and below zero) while the upper bound
                # keeps it firing: the state's value moves, no notification is sent
                drop = Observation(
                    rule.name,
                    scope_for(rule),
                    -0.0708,
                    1234.0,
                    at + timedelta(minutes=1),
                    resolve_value=rule.threshold + 0.3,
                    estimate=0.0412,
                )
                later, quiet = evaluate(rule, state, drop, at + timedelta(minutes=1))
                assert later.status.value == "firing" and not quiet, rule.name
                assert later.last_value == -0.0708
            async with engine.begin() as conn:
                assert await repo.save_state(conn, later, None)
                await repo.record_history(conn, notes)
            fingerprints[state.fingerprint] = rule
        alerts = await firing_alerts(engine, Segment())
    finally:
        await engine.dispose()
    assert {a["fingerprint"] for a in alerts} == set(fingerprints)
    page = alerts_table(alerts)
    rows = table_rows(page)
    assert len(rows) == len(rules)
    for row, a in zip(rows, alerts, strict=True):
        rule = fingerprints[a["fingerprint"]]
        bounded = rule.estimate == "lower_bound"
        assert row["rule"] == rule.name
        # the table's numbers are the summary's: rendering the rule's template with what the
        # table shows gives the summary the table shows
        context = {
            "rule": rule.name,
            "value": row["99% bound"] if bounded else row["estimate"],
            "estimate": row["estimate"],
            "threshold": row["threshold"],
            "samples": row["items"],
        }
        scope = scope_for(rule)
        context.update({k: scope.get(k, "all") for k in ("agent", "domain", "tier")})
        assert render(rule.annotations.summary, context) == row["summary"], rule.name
        assert row["threshold"] == f"{rule.threshold:g}"
        if bounded:  # the bound that fired, not the later -0.0708, and its estimate
            bound = breaching(rule)
            assert row["99% bound"] == f"{bound:.4g}" != "-0.0708", rule.name
            assert row["estimate"] == f"{bound + 0.0987:.4g}", rule.name
            assert f"{bound + 0.0987:.4g}" in row["summary"] and f"{bound:.4g}" in row["summary"]
        else:
            assert row["99% bound"] == "-" and row["estimate"] == f"{breaching(rule):.4g}"
        assert re.search(rf'data-key="alerts/{a["fingerprint"]}/threshold"', page)


def test_an_alert_not_notified_yet_says_so() -> None:
    row = {
        "time": T0,
        "fingerprint": "f" * 16,
        "severity": None,
        "rule": "ece_tier3",
        "agent_id": AGENT,
        "summary": None,
        "value": None,
        "estimate": None,
        "threshold": None,
        "samples": None,
        "notified_at": None,
    }
    (shown,) = table_rows(alerts_table([row]))
    assert shown["summary"] == "not notified yet (silenced or flapping)"
    assert shown["estimate"] == shown["99% bound"] == shown["as of"] == "-"
