"""Error texts and exit codes of the CLI that once misled: each names the option or the thing
that is wrong, in one line, with the same exit code with and without ``--json``."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from monitor.cli.main import app


def run(url: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env={"MONITOR_DATABASE_URL": url})
    return result.exit_code, " ".join(result.stdout.split()), " ".join(result.stderr.split())


def test_drift_blames_the_option_that_is_wrong(database_url: str) -> None:
    code, _, err = run(database_url, "drift", "--at", "banana")
    assert code == 2
    assert "Invalid value for --at: 'banana' is not an ISO 8601 time" in err
    assert "--to" not in err
    code, _, err = run(
        database_url, "drift", "--baseline-from", "nope", "--baseline-to", "2026-01-01T00:00:00Z"
    )
    assert code == 2 and "Invalid value for --baseline-from: 'nope'" in err


def test_calibration_show_unknown_agent_exits_1_with_and_without_json(database_url: str) -> None:
    code, out, _ = run(database_url, "calibration", "show", "nobody")
    assert code == 1 and "no recalibration map for 'nobody'" in out
    code, out, _ = run(database_url, "calibration", "show", "nobody", "--json")
    assert code == 1
    assert json.loads(out) == {"agent_id": "nobody", "maps": []}
