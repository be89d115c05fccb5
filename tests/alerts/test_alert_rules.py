"""Alert rules file: validation errors name file, line and field; defaults."""

from __future__ import annotations

import textwrap
from datetime import timedelta

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from monitor.alerts.durations import format_duration, parse_duration
from monitor.alerts.rules import (
    Comparison,
    Metric,
    RuleSet,
    Scope,
    Severity,
    default_rules,
    load_rules,
    rules_to_dict,
)
from monitor.core.errors import ConfigError

GOOD = """\
evaluation_interval: 15s
group_wait: 10s
repeat_interval: 2h
rules:
  - name: ece_tier3
    metric: ece
    scope: {agent: "billing-*", tier: 3}
    comparison: ">"
    threshold: 0.05
    window: 1h
    for: 10m
    severity: critical
    labels: {team: payments}
    annotations:
      summary: "ECE {value} for {agent}"
      runbook_url: docs/runbooks.md#calibration-error
  - name: authz
    metric: judge_failure_rate
    category: fabrication:authorization
    comparison: ">"
    threshold: 0
    window: 15m
    severity: critical
    repeat_interval: 30m
    redact_customer_content: false
    annotations: {summary: fabricated authorization}
"""


def error_of(text: str, source: str = "alerts.yaml") -> str:
    with pytest.raises(ConfigError) as info:
        load_rules(text, source)
    return str(info.value)


def with_rule(body: str) -> str:
    """A valid file whose first rule is ``ece_tier3`` and whose second rule is ``body``."""
    return GOOD.split("  - name: authz")[0] + textwrap.indent(textwrap.dedent(body), "  ")


def test_good_file_loads_with_types_defaults_and_inherited_repeat_interval() -> None:
    rs = load_rules(GOOD, "alerts.yaml")
    assert rs.evaluation_interval == timedelta(seconds=15)
    assert rs.group_wait == timedelta(seconds=10)
    assert rs.group_interval == timedelta(minutes=5)  # default
    ece, authz = rs.rules
    assert ece.metric is Metric.ECE and ece.comparison is Comparison.GT
    assert ece.severity is Severity.CRITICAL
    assert ece.scope == Scope(agent="billing-*", tier="3")
    assert ece.for_ == timedelta(minutes=10)
    assert ece.window == timedelta(hours=1)
    assert ece.min_samples == 100  # calibration default
    assert ece.repeat_interval == timedelta(hours=2)  # inherited from the top level
    assert ece.redact_customer_content is True
    assert authz.repeat_interval == timedelta(minutes=30)  # its own wins
    assert authz.min_samples == 1 and authz.category == "fabrication:authorization"
    assert authz.for_ == timedelta(0) and authz.redact_customer_content is False
    assert rs.rule("authz") is authz
    with pytest.raises(KeyError):
        rs.rule("nope")


def test_rules_round_trip_through_json_dump() -> None:
    rs = load_rules(GOOD, "alerts.yaml")
    dumped = rules_to_dict(rs)
    assert dumped["rules"][0]["for"] == "10m"
    assert dumped["rules"][0]["window"] == "1h"
    assert load_rules(yaml.safe_dump(dumped), "again.yaml") == rs


def test_scope_globs() -> None:
    scope = Scope(agent="billing-*", tier="[23]")
    assert scope.matches({"agent": "billing-eu", "tier": 3, "domain": "x"})
    assert not scope.matches({"agent": "billing-eu", "tier": "1"})
    assert not scope.matches({"agent": "support", "tier": "2"})
    assert not scope.matches({"tier": "2"})  # constrained field missing
    assert Scope().matches({})


def test_wrong_type_names_line_and_field() -> None:
    text = GOOD.replace("threshold: 0.05", "threshold: high")
    assert error_of(text) == (
        "alerts.yaml:9: rules[0].threshold: Input should be a valid number (got 'high')"
    )


def test_unknown_key_is_rejected_at_its_line() -> None:
    text = GOOD.replace("    window: 15m\n", "    window: 15m\n    thresold: 3\n")
    assert error_of(text) == "alerts.yaml:23: rules[1].thresold: Extra inputs are not permitted"


def test_missing_field_points_at_the_rule() -> None:
    text = GOOD.replace("    severity: critical\n    repeat_interval: 30m\n", "")
    assert error_of(text) == "alerts.yaml:17: rules[1].severity: Field required"


def test_bad_enum_and_duration_and_nested_field() -> None:
    text = (
        GOOD.replace(
            'comparison: ">"\n    threshold: 0.05', 'comparison: "=="\n    threshold: 0.05'
        )
        .replace("window: 15m", "window: 15 minutes")
        .replace("team: payments", "team: 7")
    )
    lines = error_of(text).splitlines()
    assert lines[0].startswith("alerts.yaml:8: rules[0].comparison: Input should be '>'")
    assert (
        lines[1] == "alerts.yaml:13: rules[0].labels.team: Input should be a valid string (got 7)"
    )
    assert lines[2] == (
        "alerts.yaml:22: rules[1].window: '15 minutes' is not a duration like 30s, 5m, 1h30m or 1d"
        " (units ms, s, m, h, d, w)"
    )
    assert len(lines) == 3


def test_cross_field_rules_name_the_field() -> None:
    missing_category = with_rule("""\
        - name: fab
          metric: judge_failure_rate
          comparison: ">"
          threshold: 0
          window: 5m
          severity: info
          annotations: {summary: s}
        """)
    assert error_of(missing_category) == (
        "alerts.yaml:17: rules[1].category: required when metric is judge_failure_rate"
    )
    test_on_ece = with_rule("""\
        - name: e
          metric: ece
          test: psi
          comparison: ">"
          threshold: 0.1
          window: 5m
          severity: info
          annotations: {summary: s}
        """)
    assert (
        error_of(test_on_ece) == "alerts.yaml:19: rules[1].test: only allowed when metric is drift"
    )
    out_of_range = GOOD.replace("threshold: 0.05", "threshold: 5")
    assert error_of(out_of_range) == (
        "alerts.yaml:9: rules[0].threshold: ece takes values in [0.0, 1.0]"
    )
    bad_tier = GOOD.replace("tier: 3}", "tier: 4}")
    assert error_of(bad_tier) == (
        "alerts.yaml:7: rules[0].scope.tier: tier must be 1, 2 or 3 (or a glob such as '[23]')"
        " (got 4)"
    )


def test_duplicate_rule_names_name_both_lines() -> None:
    text = GOOD.replace("name: authz", "name: ece_tier3")
    assert error_of(text) == (
        "alerts.yaml:17: rules[1].name: duplicate rule name 'ece_tier3' (first defined at "
        "rules[0].name, line 5)"
    )


def test_duplicate_yaml_key_and_syntax_errors_and_top_level() -> None:
    dup = GOOD.replace("    window: 1h\n", "    window: 1h\n    window: 2h\n")
    assert error_of(dup) == (
        "alerts.yaml:11: rules[0].window: duplicate key (first given at line 10)"
    )
    broken = GOOD.replace("    window: 1h\n", "    window: [1h\n")
    assert error_of(broken).startswith("alerts.yaml:11: not valid YAML:")
    assert error_of("- a\n- b\n") == (
        "alerts.yaml:1: the top level must be a mapping with a 'rules' list, got list"
    )
    assert load_rules("", "empty.yaml") == RuleSet()


def test_default_rules_load_and_encode_tier_thresholds() -> None:
    rs = default_rules()
    by_name = {r.name: r for r in rs.rules}
    ece = {r.scope.tier: r.threshold for r in rs.rules if r.metric is Metric.ECE}
    assert ece == {"3": 0.05, "2": 0.08, "1": 0.12}
    assert by_name["ece_tier3"].severity is Severity.CRITICAL
    assert by_name["authorization_fabrication"].category == "fabrication:authorization"
    assert by_name["authorization_fabrication"].breached(0.001)
    assert not by_name["authorization_fabrication"].breached(0.0)
    metrics = {r.metric for r in rs.rules}
    assert {Metric.DRIFT, Metric.ESCALATION_INVERSION, Metric.DLQ_RATE} <= metrics
    assert Metric.CONSUMER_LAG in metrics
    assert by_name["ingest_stalled"].metric is Metric.INGEST_STALL_S
    assert by_name["ingest_stalled"].severity is Severity.CRITICAL
    for r in rs.rules:
        assert r.annotations.runbook_url is not None
        assert r.annotations.runbook_url.startswith("docs/runbooks.md#")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", timedelta(0)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(minutes=90)),
        ("1d", timedelta(days=1)),
        ("2w", timedelta(weeks=2)),
        ("250ms", timedelta(milliseconds=250)),
        ("1.5h", timedelta(minutes=90)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "5", "-5m", "5 m", "5x", "m5", "1h 30m"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=10**11))
def test_format_duration_round_trips(ms: int) -> None:
    d = timedelta(milliseconds=ms)
    text = format_duration(d)
    assert parse_duration(text) == d
    assert " " not in text
