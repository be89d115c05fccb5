"""CLI start-up stays short: `monitor --help` imports no command module, and a command imports
only what it needs (structural checks in a fresh interpreter, not timings; the measured times
are in docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer.main
from typer.testing import CliRunner

from monitor.cli.main import COMMANDS, app, load_module_commands

HEAVY = ("faust", "mode", "aiokafka", "scipy", "sklearn", "matplotlib")


def loaded_after(code: str) -> list[str]:
    """Top-level packages of HEAVY (plus numpy, sqlalchemy) present in sys.modules after
    running ``code`` in a fresh interpreter."""
    probe = (
        f"import sys\n{code}\n"
        "import json; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    found = set(json.loads(done.stdout.splitlines()[-1]))
    return sorted(found & {*HEAVY, "numpy", "sqlalchemy"})


def test_importing_the_cli_and_its_help_import_no_heavy_library() -> None:
    assert loaded_after("import monitor.cli") == []
    help_run = (
        "from typer.testing import CliRunner; from monitor.cli.main import app\n"
        "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output"
    )
    assert loaded_after(help_run) == []


@pytest.mark.parametrize("module", ["calibration", "drift", "escalation", "judges", "alerts"])
def test_analytics_commands_do_not_import_scipy_sklearn_matplotlib_faust(module: str) -> None:
    """scipy and scikit-learn load at their first use (monitor.core.lazy), matplotlib only for the
    report, faust and aiokafka only for the worker and the Kafka commands."""
    assert set(loaded_after(f"import monitor.cli.{module}")) <= {"numpy", "sqlalchemy"}


def test_every_command_is_listed_with_its_own_help() -> None:
    group = typer.main.get_command(app)
    listed = list(getattr(group, "commands", {}))
    assert listed == list(COMMANDS)
    registered: dict[str, str] = {}
    for module in sorted({m for m, _ in COMMANDS.values()}):
        for name, command in load_module_commands(module).items():
            registered[name] = module
            real = " ".join((command.help or "").split())
            short = COMMANDS[name][1]
            # the listing's line starts the way the command's own help does
            assert real.split()[:3] == short.split()[:3], (name, real, short)
    assert registered == {name: module for name, (module, _) in COMMANDS.items()}
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f" {name} " in result.output


def test_help_has_no_bool_placeholders_or_raw_backticks() -> None:
    for argv in (
        ["--help"],
        *([name, "--help"] for name in COMMANDS),
        ["alerts", "list", "--help"],
        ["calibration", "fit", "--help"],
    ):
        result = CliRunner().invoke(app, argv, env={"COLUMNS": "120"})
        assert result.exit_code == 0, (argv, result.output)
        assert "<bool>" not in result.output, argv
        assert "`" not in result.output, argv
    assert "--json" in CliRunner().invoke(app, ["drift", "--help"]).output
