"""The layout rules of docs/architecture.md, enforced on the source.

- no import circles between monitor's modules (any import, also inside a function, under
  ``TYPE_CHECKING`` or through ``importlib.import_module`` with a literal name: a circle is a
  design smell even where Python tolerates it);
- pure modules import no I/O library and no module that is not pure itself;
- only ``monitor.worker.app`` imports faust (and only ``monitor.worker`` the mode library);
- only ``monitor.config`` reads the environment;
- no loose modules at the top of ``monitor/`` beyond the entry points;
- nothing connects at import time (every module imported with the network switched off).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "monitor"

IO_LIBRARIES = frozenset(
    {
        "sqlalchemy",
        "asyncpg",
        "alembic",
        "aiokafka",
        "faust",
        "mode",
        "httpx",
        "aiohttp",
        "slack_sdk",
        "grafana_client",
        "prometheus_client",
        "matplotlib",
        "socket",
        "subprocess",
        "urllib.request",
        "requests",
        "http.client",
        "http.server",
        "grpc",
    }
)


def _io(external: set[str]) -> list[str]:
    return sorted(
        e for e in external if any(e == lib or e.startswith(lib + ".") for lib in IO_LIBRARIES)
    )


# Packages whose every module is pure.
PURE_PACKAGES = ("monitor.contract", "monitor.core", "monitor.sampling", "monitor.sim")
# Packages that are I/O edges as a whole (command line, embedded stack, worker, store, the
# report: it queries, plots and writes files).
EDGE_PACKAGES = (
    "monitor.cli",
    "monitor.stack",
    "monitor.worker",
    "monitor.store",
    "monitor.report",
    "monitor.telemetry",
)
# Settings are a value: pure code may take them (only ``load_settings`` reads the environment).
NEUTRAL = frozenset({"monitor", "monitor.config"})
# Capability packages hold a pure core and their I/O edge side by side: these are the edges.
# Every other module of these packages must be pure (a new module is pure unless listed here).
EDGE_MODULES = frozenset(
    {
        "monitor.ingest.loop",
        "monitor.ingest.writer",
        "monitor.ingest.items_sql",
        "monitor.ingest.rollup_sql",
        "monitor.ingest.offsets",
        "monitor.ingest.poison",
        "monitor.ingest.dlq_publish",
        "monitor.ingest.paused_retry",
        "monitor.ingest.rebalance",
        "monitor.ingest.escalation_sql",
        "monitor.ingest.conversation_minutes_sql",
        "monitor.ingest.design_sql",
        "monitor.ingest.label_sql",
        "monitor.ingest.direct_sql",
        "monitor.ingest.dead_letter_sql",
        "monitor.ingest.decoded",
        "monitor.ingest.connections",
        "monitor.consume.guarded_fetch",
        "monitor.consume.batch_scan",
        "monitor.analytics.repo_escalation",
        "monitor.analytics.design_effect",
        "monitor.judges.llm",
        "monitor.judges.repo",
        "monitor.judges.stats",
        "monitor.judges.worker",
        "monitor.judges.assembly",
        "monitor.judges.quality_repo",
        "monitor.judges.transcript_repo",
        "monitor.judges.runner",
        "monitor.analytics.repo",
        "monitor.analytics.write",
        "monitor.analytics.reports",
        "monitor.analytics.examples",
        "monitor.analytics.periodic",
        "monitor.judges.judge_noise",
        "monitor.analytics.drift_state",
        "monitor.alerts.evaluate",
        "monitor.alerts.observations",
        "monitor.alerts.observation_repo",
        "monitor.alerts.exemplar_repo",
        "monitor.alerts.alert_view",
        "monitor.alerts.outbox",
        "monitor.alerts.notifier",
        "monitor.alerts.repo",
        "monitor.alerts.timeline",
        "monitor.alerts.timeline_sim",
        "monitor.alerts.sink_check",
        "monitor.alerts.backtest",
        "monitor.alerts.sinks.base",
        "monitor.alerts.sinks.webhook",
        "monitor.alerts.sinks.alertmanager",
        "monitor.alerts.sinks.slack",
        "monitor.alerts.sinks.registry",
        "monitor.dashboards.push",
        "monitor.replay.send",
        "monitor.sdk",
        "monitor.sdk.emitter_async",
        "monitor.sdk.batches",
        "monitor.sdk.emitter_sync",
        "monitor.otel.topic",
        "monitor.otel.pending",
        "monitor.otel.evaluation_export",
        "monitor.otel.sweeper",
        "monitor.otel.grpc_receiver",
        "monitor.gate.state",
        "monitor.gate.effect_repo",
        "monitor.sdk.gate_client",
        "monitor.gate.buffer",
        "monitor.gate.producer",
        "monitor.gate.server",
        "monitor.gate.answering",
        "monitor.gate.http_server",
        "monitor.gate.buffer_slot",
        "monitor.auth.repo",
        "monitor.auth.origin_key",
    }
)
# mode (faust's service library) only where the worker's long-running services are defined
MODE_ALLOWED = frozenset(
    {
        "monitor.worker.services",
        "monitor.otel.topic",
        "monitor.otel.sweeper",
        "monitor.otel.grpc_receiver",
    }
)
TOP_LEVEL_ALLOWED = frozenset({"__init__.py", "config.py"})


def _modules() -> dict[str, Path]:
    found = {}
    for path in PKG.rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _literal_import_module(node: ast.AST) -> bool:
    """``importlib.import_module("monitor....")`` with a literal name: an import like any other
    (a circle through it is still a circle)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "import_module"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and node.args[0].value.startswith("monitor.")
    )


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(monitor modules imported, top-level names of the other libraries imported)."""
    internal: set[str] = set()
    external: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "monitor":
                    internal.add(alias.name)
                else:
                    external.add(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "monitor":
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    internal.add(sub if sub in MODULES else node.module)
            else:
                external.add(node.module)
        elif _literal_import_module(node):
            assert isinstance(node, ast.Call) and isinstance(node.args[0], ast.Constant)
            internal.add(str(node.args[0].value))
    return {m for m in internal if m in MODULES}, external


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _in(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _is_pure(name: str) -> bool:
    if _in(name, PURE_PACKAGES):
        return True
    if _in(name, EDGE_PACKAGES) or name in EDGE_MODULES:
        return False
    return name not in NEUTRAL


def test_no_import_circles() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v][0] - {v}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in sorted(GRAPH):
        if name not in index:
            visit(name)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_pure_modules_import_no_io_and_no_edge() -> None:
    offenders = []
    for name, (internal, external) in sorted(GRAPH.items()):
        if not _is_pure(name):
            continue
        io = _io(external)
        edges = sorted(m for m in internal if not _is_pure(m) and m not in NEUTRAL)
        if io or edges:
            offenders.append(f"{name}: io={io} edges={edges}")
    assert not offenders, "pure modules with I/O:\n" + "\n".join(offenders)


def test_pure_cores_exist_where_the_docs_say() -> None:
    # the rule above must not hold vacuously: these are pure by design
    for name in (
        "monitor.contract.events",
        "monitor.sampling.policy",
        "monitor.analytics.drift",
        "monitor.analytics.calibration",
        "monitor.alerts.lifecycle",
        "monitor.judges.deterministic",
        "monitor.ingest.rows",
        "monitor.ingest.http",
        "monitor.otel.mapping",
        "monitor.alerts.sinks.slack_blocks",
    ):
        assert name in MODULES and _is_pure(name), name


def test_only_the_worker_imports_faust() -> None:
    faust = sorted(
        n for n, (_, ext) in GRAPH.items() if any(e.split(".")[0] == "faust" for e in ext)
    )
    mode = sorted(n for n, (_, ext) in GRAPH.items() if any(e.split(".")[0] == "mode" for e in ext))
    assert faust == ["monitor.worker.app"]
    assert set(mode) <= MODE_ALLOWED, mode


def _reads_environment(node: ast.AST) -> bool:
    names = ("environ", "getenv", "environb")
    if isinstance(node, ast.Attribute):
        return node.attr in names
    if isinstance(node, ast.ImportFrom) and node.module == "os":
        return any(a.name in names for a in node.names)
    return False


def test_only_config_reads_the_environment() -> None:
    readers = []
    for name, path in MODULES.items():
        if name == "monitor.config":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if _reads_environment(node):
                readers.append(f"{name}:{node.lineno}")
    assert not readers, "environment read outside monitor.config: " + ", ".join(readers)


def test_no_loose_modules_at_the_top() -> None:
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name not in TOP_LEVEL_ALLOWED)
    assert not loose, f"loose modules at the top of monitor/: {loose}"


def test_nothing_connects_at_import_time() -> None:
    probe = f"""
import importlib, socket, sys
def refuse(*a, **k):
    raise AssertionError("network use at import time")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
for name in {sorted(n for n in MODULES if not n.endswith("__main__"))!r}:
    importlib.import_module(name)
print("ok", len(sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok")


def test_store_depends_on_nothing_but_core_and_config() -> None:
    # capabilities keep their queries beside them; the shared store stays at the bottom
    upward = sorted(
        f"{name} -> {dep}"
        for name, (internal, _) in GRAPH.items()
        if _in(name, ("monitor.store",))
        for dep in internal
        if not _in(dep, ("monitor.store", "monitor.core", "monitor.config"))
    )
    assert not upward, "store imports upwards: " + ", ".join(upward)


# --- packages ---------------------------------------------------------------------------------

# The package layers, bottom first: a package imports only packages of lower layers (the same
# order is drawn in docs/architecture.md). ``config`` (settings, a value) is a layer of its own.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("contract", "dashboards"),
    ("sampling", "sdk", "consume", "replay", "sim"),
    ("config",),
    ("store",),
    ("telemetry", "auth"),
    ("analytics",),
    ("ingest", "alerts", "otel"),
    ("judges",),
    ("gate",),
    ("report", "stack", "worker"),
    ("cli",),
)
LAYER_OF = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _package(module: str) -> str:
    """``monitor.<package>...`` -> ``<package>`` (``config`` for monitor.config); "" for monitor."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _public_modules(package: str) -> set[str]:
    """``PUBLIC_MODULES`` of ``monitor/<package>/__init__.py``, read from the source."""
    tree = ast.parse((PKG / package / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "PUBLIC_MODULES" for t in targets):
                assert node.value is not None
                return set(ast.literal_eval(node.value))
    raise AssertionError(f"monitor/{package}/__init__.py declares no PUBLIC_MODULES")


def _cross_package(edges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(a, b) for a, b in edges if _package(a) and _package(b) and _package(a) != _package(b)]


def _upward(edges: list[tuple[str, str]]) -> list[str]:
    """The imports of a package at or above its own layer."""
    return [
        f"{a} -> {b}"
        for a, b in _cross_package(edges)
        if LAYER_OF[_package(b)] >= LAYER_OF[_package(a)]
    ]


def _private(edges: list[tuple[str, str]]) -> list[str]:
    """The imports of another package's module that its ``PUBLIC_MODULES`` does not name."""
    found = []
    for a, b in _cross_package(edges):
        package = _package(b)
        if package == "config" or b == f"monitor.{package}":
            continue  # a module of its own, or the package's own names
        if b.split(".", 2)[2] not in _public_modules(package):
            found.append(f"{a} -> {b}")
    return found


EDGES = sorted((name, dep) for name, (internal, _) in GRAPH.items() for dep in internal)


def test_every_package_has_a_layer() -> None:
    packages = {p.parent.name for p in PKG.glob("*/__init__.py")} | {"config"}
    assert packages == set(LAYER_OF), packages ^ set(LAYER_OF)


def test_packages_import_only_lower_layers() -> None:
    assert not _upward(EDGES), "imports at or above the importer's layer:\n" + "\n".join(
        _upward(EDGES)
    )


def test_packages_import_each_other_only_through_their_public_surface() -> None:
    private = _private(EDGES)
    assert not private, "imports of modules outside PUBLIC_MODULES:\n" + "\n".join(private)


def test_the_package_rules_catch_a_back_edge_and_a_private_import() -> None:
    # the two rules above must not hold vacuously
    assert _upward([("monitor.store.engine", "monitor.worker.app")])
    assert _upward([("monitor.ingest.loop", "monitor.otel.mapping")])  # same layer
    assert not _upward([("monitor.worker.app", "monitor.store.engine")])
    assert _private([("monitor.cli.main", "monitor.ingest.writer_internals")])
    assert not _private([("monitor.worker.app", "monitor.otel")])
