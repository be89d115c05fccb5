"""``monitor config``: docs/configuration.md is generated from ``Settings`` and current, lists
every setting with a description, and the effective view masks every secret and names where
each value came from. Pure: no broker, no database."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from monitor.cli.config import GROUPS, MASK, OTHER, grouped, masked, render_markdown
from monitor.cli.main import app
from monitor.config import Settings, env_names
from monitor.core.fields import is_secret

REPO = Path(__file__).resolve().parent.parent.parent
DOC = REPO / "docs" / "configuration.md"
# names that hold a credential (tokens, keys, secrets, passwords, signed URLs, auth headers);
# ``keys_refresh_s`` and the like are about keys, not keys themselves
SECRET_NAME = re.compile(r"(token|secret|password|_key|webhook_url|headers)$")


def run(*args: str, env: dict[str, str | None] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["config", *args], env={"COLUMNS": "250", **(env or {})})
    return result.exit_code, result.stdout, result.stderr


def rows_of(env: dict[str, str | None]) -> dict[str, dict[str, str]]:
    code, out, err = run("--json", env=env)
    assert code == 0, err
    return {row["variable"]: row for row in json.loads(out)}


def test_reference_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == render_markdown(), (
        "docs/configuration.md is stale: run `make config-docs`"
    )


def test_reference_lists_every_setting_once_with_its_description() -> None:
    text = render_markdown()
    table_rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(table_rows) == len(Settings.model_fields)
    for name, field in Settings.model_fields.items():
        assert field.description, f"Settings.{name} has no description="
        (row,) = [r for r in table_rows if r.startswith(f"| `{env_names(name, field)[0]}`")]
        assert field.description.replace("|", "\\|") in row, name
    listed = [n for _, names in grouped() for n in names]
    assert sorted(listed) == sorted(Settings.model_fields)
    assert [g.title for g, _ in grouped() if g is not OTHER] == [g.title for g in GROUPS]


def test_secret_settings_are_marked() -> None:
    for name, field in Settings.model_fields.items():
        if SECRET_NAME.search(name):
            assert is_secret(field), f"Settings.{name} holds a credential: declare it secret(...)"
    assert any(is_secret(f) for f in Settings.model_fields.values())


def test_config_masks_every_secret(tmp_path: Path) -> None:
    secrets = {
        env_names(name, field)[0]: f"sentinel-{name}-0f3a"
        for name, field in Settings.model_fields.items()
        if is_secret(field)
    }
    env = {
        **secrets,
        "MONITOR_ENV_FILE": str(tmp_path / "none.env"),
        "MONITOR_DATABASE_URL": "postgresql://monitor:pw-0f3a@db:5432/monitor",
    }
    for args in ((), ("--json",)):
        code, out, err = run(*args, env=env)
        assert code == 0, err
        assert "0f3a" not in out, "a secret or a URL password was printed"
    rows = rows_of(env)
    for variable in secrets:
        assert rows[variable]["value"] == MASK and rows[variable]["source"] == "environment"
    assert rows["MONITOR_DATABASE_URL"]["value"] == (
        f"postgresql+asyncpg://monitor:{MASK}@db:5432/monitor"
    )


def test_config_names_each_value_source(tmp_path: Path) -> None:
    dotenv = tmp_path / "prod.env"
    dotenv.write_text(
        "MONITOR_WEB_PORT=7001\nMONITOR_BATCH_MAX_EVENTS=5\nMONITOR_SLACK_BOT_TOKEN=xoxb-0f3a\n"
        "GRAFANA_ADMIN_PASSWORD=not-a-monitor-setting\n"
    )
    rows = rows_of({"MONITOR_ENV_FILE": str(dotenv), "MONITOR_BATCH_MAX_EVENTS": "9"})
    assert rows["MONITOR_WEB_PORT"] | {"group": ""} == {
        "group": "",
        "variable": "MONITOR_WEB_PORT",
        "value": "7001",
        "source": str(dotenv),
    }
    assert (
        rows["MONITOR_BATCH_MAX_EVENTS"]["value"],
        rows["MONITOR_BATCH_MAX_EVENTS"]["source"],
    ) == (
        "9",
        "environment",
    )
    assert rows["MONITOR_SLACK_BOT_TOKEN"]["value"] == MASK
    assert rows["MONITOR_SLACK_BOT_TOKEN"]["source"] == str(dotenv)
    assert (rows["MONITOR_TOPIC_EVENTS"]["value"], rows["MONITOR_TOPIC_EVENTS"]["source"]) == (
        "agent-events",
        "default",
    )
    assert len(rows) == len(Settings.model_fields)


def test_broker_and_database_of_a_running_monitor_up(tmp_path: Path) -> None:
    """Beside ``monitor up`` the commands take its broker and database (endpoints.json while
    its broker port answers): so does ``monitor config``, naming that source."""
    with socket.create_server(("127.0.0.1", 0)) as broker:
        port = broker.getsockname()[1]
        (tmp_path / "endpoints.json").write_text(
            json.dumps(
                {
                    "kafka_bootstrap": f"127.0.0.1:{port}",
                    "database_url": "postgresql://postgres:pw-0f3a@127.0.0.1:5433/monitor",
                    "web_url": "http://127.0.0.1:6066",
                }
            )
        )
        env: dict[str, str | None] = {
            "MONITOR_ENV_FILE": "",
            "MONITOR_STATE_DIR": str(tmp_path),
            "MONITOR_KAFKA_BOOTSTRAP": None,
            "MONITOR_DATABASE_URL": None,
            "DATABASE_URL": None,
        }
        rows = rows_of(env)
    source = f"monitor up ({tmp_path / 'endpoints.json'})"
    assert rows["MONITOR_KAFKA_BOOTSTRAP"] | {"group": ""} == {
        "group": "",
        "variable": "MONITOR_KAFKA_BOOTSTRAP",
        "value": f"127.0.0.1:{port}",
        "source": source,
    }
    assert rows["MONITOR_DATABASE_URL"]["value"] == (
        f"postgresql+asyncpg://postgres:{MASK}@127.0.0.1:5433/monitor"
    )
    assert rows["MONITOR_DATABASE_URL"]["source"] == source
    assert rows["MONITOR_STATE_DIR"]["source"] == "environment"
    # the broker gone (the port closed), the settings are the declared ones again
    rows = rows_of(env)
    assert (
        rows["MONITOR_KAFKA_BOOTSTRAP"]["value"],
        rows["MONITOR_KAFKA_BOOTSTRAP"]["source"],
    ) == (
        "unset",
        "default",
    )


def test_database_url_from_its_conventional_name() -> None:
    rows = rows_of(
        {
            "MONITOR_ENV_FILE": "",
            "DATABASE_URL": "postgresql://u@h/db",
            "MONITOR_DATABASE_URL": None,
        }
    )
    assert rows["DATABASE_URL"]["value"] == "postgresql+asyncpg://u@h/db"
    assert rows["DATABASE_URL"]["source"] == "environment"


@pytest.mark.parametrize(
    "value,secret,shown",
    [
        (None, True, "unset"),
        ("", True, '""'),
        ("abc", True, MASK),
        ("https://hooks.example/x?token=abc", False, "https://hooks.example/x?token=abc"),
        ("https://user:pw@am.example:9093", False, f"https://user:{MASK}@am.example:9093"),
        (True, False, "true"),
    ],
)
def test_masked(value: object, secret: bool, shown: str) -> None:
    assert masked(value, secret) == shown


def test_markdown_to_a_file_and_output_needs_markdown(tmp_path: Path) -> None:
    out = tmp_path / "configuration.md"
    code, stdout, _ = run("--markdown", "--output", str(out))
    assert code == 0 and stdout.strip() == f"wrote {out}"
    assert out.read_text(encoding="utf-8") == render_markdown()
    code, _, err = run("--output", str(out))
    assert code == 2 and "--output goes with --markdown" in " ".join(err.split())
