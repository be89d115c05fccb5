"""Tables never cut the names on-call looks for (agents, rules), whatever the width: name
columns keep their full width, other columns wrap, a too-narrow terminal gets one block per
row, and piped output is as wide as the table needs."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from rich.console import Console
from typer.testing import CliRunner

from monitor.alerts.states import AlertState, Status
from monitor.cli.alerts import alerts_table
from monitor.cli.analytics_common import print_table
from monitor.cli.main import app
from tests.alerts.test_alert_store import seed_states

AGENT = "sim-airline-calibrated-with-a-very-long-agent-name"
RULE = "escalation_inversion_tier3_custom_rule"
T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def row(agent: str = AGENT, rule: str = RULE) -> dict[str, object]:
    return {
        "fingerprint": "0123456789abcdef",
        "rule": rule,
        "status": "firing",
        "severity": "critical",
        "scope": {"agent": agent, "tier": "3"},
        "value": 0.3123,
        "comparison": ">",
        "threshold": 0.15,
        "samples": 812.0,
        "since": T0,
        "silenced": False,
        "silence_id": None,
        "acked_by": None,
    }


def render(width: int) -> list[str]:
    buf = io.StringIO()
    print_table(Console(file=buf, width=width, color_system=None), alerts_table([row()]))
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("width", [240, 120, 80, 40])
def test_names_are_never_cut(width: int) -> None:
    lines = render(width)
    if lines[1].startswith("┏"):  # a table fits the width (blocks may run longer: soft wrap)
        assert all(len(line) <= width for line in lines)
    text = "\n".join(lines)
    assert "…" not in text and "..." not in text
    assert any("0123456789abcdef" in line for line in lines), text  # `alerts ack` needs it
    assert any(AGENT in line for line in lines), text
    assert any(RULE in line for line in lines), text


def test_wide_enough_is_a_table_too_narrow_is_one_block_per_row() -> None:
    wide = render(240)
    assert wide[1].startswith("┏") and any(line.startswith("│ 0123456789abcdef") for line in wide)
    narrow = render(60)
    assert not any(line.startswith(("┏", "│")) for line in narrow)
    assert narrow[1] == "0123456789abcdef"  # the block starts with the row's first name
    assert f"  scope: agent={AGENT},tier=3" in narrow


def test_alerts_list_piped_keeps_long_names(database_url: str) -> None:
    seed_states(
        database_url,
        AlertState(
            "f" * 16,
            RULE,
            {"agent": AGENT, "tier": "3"},
            status=Status.FIRING,
            active_since=T0,
            fired_at=T0,
            notified=1,
            last_value=0.31,
            last_samples=900,
        ),
    )
    result = CliRunner().invoke(
        app, ["alerts", "list"], env={"MONITOR_DATABASE_URL": database_url, "COLUMNS": "60"}
    )
    assert result.exit_code == 0, result.output
    assert f"agent={AGENT},tier=3" in result.output and RULE in result.output
    listed = json.loads(
        CliRunner()
        .invoke(app, ["alerts", "list", "--json"], env={"MONITOR_DATABASE_URL": database_url})
        .output
    )
    assert listed["alerts"][0]["scope"]["agent"] == AGENT
