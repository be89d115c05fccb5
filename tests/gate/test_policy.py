"""Gate policy files: loading, rule matching, errors naming file:line: field."""

from __future__ import annotations

import pytest

from monitor.core.errors import ConfigError
from monitor.gate.policy import DEFAULT_POLICY, load_policy

GOOD = """\
version: "2026-11-23"
rules:
  - agent: support-bot
    domain: airline
    tier: 3
    threshold: 0.8
    checks: [det.authorization, domain]
    on_check_failure: escalate
    fail: closed
    deadline_ms: 20
    mode: shadow
  - threshold: 0.6
    below_threshold: revise
"""


def test_a_policy_file_loads_and_the_first_matching_rule_applies() -> None:
    p = load_policy(GOOD, "gate.yaml")
    assert p.version == "2026-11-23" and p.source == "gate.yaml"
    first = p.rule_for("support-bot", "airline", 3)
    assert first is not None and first.threshold == 0.8 and first.fail == "closed"
    assert first.checks == ("det.authorization", "domain") and first.deadline_ms == 20
    assert first.mode == "shadow"
    fallback = p.rule_for("support-bot", "airline", 2)  # tier 2: the wildcard rule
    assert fallback is not None and fallback.threshold == 0.6
    assert fallback.below_threshold == "revise" and fallback.fail == "open"
    assert fallback.mode == "enforce"  # the default
    assert "det.unsupported_figure" in fallback.checks
    assert DEFAULT_POLICY.rule_for("anyone", None, None) is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            GOOD.replace("threshold: 0.8", "threshold: 1.5"),
            "gate.yaml:6: rules[0].threshold: Input should be less than or equal to 1",
        ),
        (
            GOOD.replace("[det.authorization, domain]", "[det.authorization, det.vibes]"),
            "gate.yaml:7: rules[0].checks: unknown check 'det.vibes'",
        ),
        (
            GOOD.replace("fail: closed", "fail: maybe"),
            "gate.yaml:9: rules[0].fail: Input should be 'open' or 'closed'",
        ),
        (
            GOOD.replace("  - threshold: 0.6\n", "  - thresold: 0.6\n"),
            "gate.yaml:12: rules[1].thresold: Extra inputs are not permitted",
        ),
        (
            GOOD.replace("mode: shadow", "mode: dry-run"),
            "gate.yaml:11: rules[0].mode: Input should be 'shadow' or 'enforce'",
        ),
        (GOOD.replace('version: "2026-11-23"\n', ""), "gate.yaml:1: version: Field required"),
        ("version: x\nrules: []\n", "gate.yaml:2: rules: Tuple should have at least 1 item"),
        ("version: x\nrules: [\n", "gate.yaml:3: not valid YAML"),
        ("- a\n", "gate.yaml:1: the top level must be a mapping with 'version' and 'rules'"),
    ],
)
def test_errors_name_the_file_the_line_and_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_policy(text, "gate.yaml")
    assert message in str(info.value).splitlines()[-1] or str(info.value).startswith(message)
