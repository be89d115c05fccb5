"""A worker given a bad sampling policy or rules file, and a gate process given a bad gate
policy, stop at once, naming file, line, field."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "command,var,text,expected",
    [
        (
            "worker",
            "MONITOR_SAMPLING_FILE",
            "strata:\n  - {tier: 3, rate: 1}\n  - {tier: 1, rate: 2}\n",
            ":3: strata[1].rate: Input should be less than or equal to 1",
        ),
        (
            "worker",
            "MONITOR_ALERT_RULES_FILE",
            "rules:\n  - name: x\n    metric: ece\n    threshold: hi\n",
            ":4: rules[0].threshold: Input should be a valid number",
        ),
        (
            "gate serve",
            "MONITOR_GATE_POLICY_FILE",
            "version: v1\nrules:\n  - threshold: 0.5\n    fail: maybe\n",
            ":4: rules[0].fail: Input should be 'open' or 'closed'",
        ),
    ],
)
def test_bad_config_file_stops_the_process_with_line_and_field(
    tmp_path: Path, command: str, var: str, text: str, expected: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    env["MONITOR_ENV_FILE"] = ""  # no dotenv file either
    env.update(
        {
            "MONITOR_KAFKA_BOOTSTRAP": "127.0.0.1:1",
            "DATABASE_URL": "postgresql://x@127.0.0.1:1/x",
            "MONITOR_STATE_DIR": str(tmp_path / "state"),
            var: str(bad),
            "COLUMNS": "200",
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "monitor.cli", *command.split()],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr + done.stdout
    assert f"{bad}{expected}" in " ".join(done.stderr.split())  # (rich may wrap lines)
    assert "Traceback" not in done.stderr
