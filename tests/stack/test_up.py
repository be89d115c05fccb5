"""``monitor up`` end to end, as a subprocess on the embedded stack (Tansu, embedded Postgres,
worker subprocess), on free ports and a private state dir.

Every process the command starts inherits ``MONITOR_STATE_DIR=<tmp state dir>`` in its
environment, which is how the tests find anything left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from monitor.contract.events import EVENT_TYPES
from monitor.stack.demo import malformed_events

REPO = Path(__file__).resolve().parents[2]
AGENTS = (
    "sim-airline-calibrated",
    "sim-retail-overconfident",
    "sim-telecom-drifting",
    "sim-airline-inverted",
)
MALFORMED = len(malformed_events(b"x"))


def _env(state_dir: Path) -> dict[str, str]:
    drop = {
        "MONITOR_KAFKA_BOOTSTRAP",
        "DATABASE_URL",
        "MONITOR_DATABASE_URL",
        "MONITOR_INGEST_TOKEN",
    }
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(MONITOR_STATE_DIR=str(state_dir), PYTHONUNBUFFERED="1", COLUMNS="120")
    return env


def _up(state_dir: Path, out: Path, *args: str) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "monitor.cli",
        "up",
        "--state-dir",
        str(state_dir),
        "--broker-port",
        "0",
        "--pg-port",
        "0",
        "--web-port",
        "0",
        "--gate-port",
        "0",
        "--otlp-grpc-port",
        "0",
        *args,
    ]
    with out.open("wb") as fh:  # as from a terminal: Ctrl-C not ignored even when this test
        # runs as a background job (nohup, `&`: SIGINT ignored, and monitor up keeps that)
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            env=_env(state_dir),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _leftovers(state_dir: Path) -> list[str]:
    """Live processes started for ``state_dir`` (by environment or command line)."""
    marker = f"MONITOR_STATE_DIR={state_dir}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker in environ or str(state_dir).encode() in cmdline:
            found.append(f"{proc.name}: {cmdline.decode(errors='replace')}")
    return found


def _wait_gone(state_dir: Path, timeout_s: float = 15) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := _leftovers(state_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _run_up(state_dir: Path, out: Path, *args: str) -> str:
    """Run ``monitor up`` to its end (150 s at most) and check it exited 0; its output."""
    proc = _up(state_dir, out, *args)
    try:
        code = proc.wait(150)
    finally:
        proc.kill()
    output = out.read_text()
    assert code == 0, output
    return output


def _wait_for(out: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in out.read_text():
        assert proc.poll() is None, out.read_text()
        assert time.monotonic() < deadline, out.read_text()
        time.sleep(0.1)


@pytest.fixture
def state_dir(private_dir: Path) -> Iterator[Path]:
    """A private state dir; whatever a failed test left running there is killed afterwards.

    Not under pytest's tmp_path: as root, the embedded Postgres runs as an unprivileged user
    that must traverse the path, and every pytest session that starts on the machine resets
    /tmp/pytest-of-root to mode 0700 (seen: `pg_ctl: could not access directory ...
    Permission denied` at stop while another suite started)."""
    path = private_dir / "state"
    yield path
    for line in _leftovers(path):
        os.kill(int(line.split(":")[0]), signal.SIGKILL)


def _table(output: str) -> dict[str, list[str]]:
    """Rows of every rich table in ``output``, keyed by their first cell (first table wins)."""
    rows = {}
    for line in output.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            rows.setdefault(cells[0], cells[1:])
    return rows


async def _stored(pg_dir: Path) -> tuple[int, int]:
    """(events, dead letters) in the ``monitor`` database kept under ``pg_dir``."""
    import asyncpg

    from monitor.stack.postgres import EmbeddedPostgres

    with EmbeddedPostgres(pg_dir) as pg:
        conn = await asyncpg.connect(pg.admin_url.rsplit("/", 1)[0] + "/monitor")
        try:
            return (
                await conn.fetchval("SELECT count(*) FROM events"),
                await conn.fetchval("SELECT count(*) FROM dead_letters"),
            )
        finally:
            await conn.close()


def test_up_runs_the_pipeline_prints_what_landed_and_stops_everything(
    state_dir: Path, tmp_path: Path
) -> None:
    output = _run_up(state_dir, tmp_path / "out.txt", "--duration", "8", "--rate", "100")
    rows = _table(output)
    for agent in AGENTS:
        assert agent in rows, output
        assert int(rows[agent][0]) > 0
    sent = re.search(r"sent ([\d,]+) events and (\d+) malformed", output)
    assert sent, output
    n_sent = int(sent[1].replace(",", ""))
    # 800 events of the four agents, and at least 30 gated conversations with their decisions
    assert 900 <= n_sent <= 1300 and int(sent[2]) == MALFORMED
    for kind in EVENT_TYPES:
        # every type was sent (gate: published by the worker), and stored exactly once
        assert rows[kind][0] == rows[kind][1] != "0", (kind, output)
    assert "Runtime trust gate" in output and "sim-gated-ignores" in output
    assert rows["total"] == [f"{n_sent:,}", f"{n_sent:,}"]
    assert f"Dead letters (DLQ): {MALFORMED} stored" in output
    for reason, _ in malformed_events(b"x"):
        assert rows[reason][0] == "1", output
    assert "/metrics" in output and "Bearer " in output and "monitor replay" in output
    # the analytics of the run: calibration, escalation and drift tables per simulated agent
    found = output[output.index("What the monitor found") :]
    for title in ("calibration of stated confidence", "escalation", "drift: recent"):
        assert title in found, output
    for agent in AGENTS:
        assert found.count(agent) >= 3, (agent, found)
    assert _wait_gone(state_dir) == []
    assert not (state_dir / "endpoints.json").exists()
    # the data stays in the state dir after the run, for exploring
    assert asyncio.run(_stored(state_dir / "pg")) == (n_sent, MALFORMED)
    assert "this run starts clean" not in output  # nothing to clean the first time
    worker_log = (state_dir / "worker.log").read_text()
    assert "monitor up: worker starting" in worker_log and "\x1b" not in worker_log
    # the gated agents asked the gate process (its own port and log), not the worker
    gate_url = re.search(r"starting the gate on (http://127\.0\.0\.1:\d+)", output)
    assert gate_url and f"gate {gate_url[1]}" in " ".join(output.split()), output
    assert "monitor up: gate starting" in (state_dir / "gate.log").read_text()

    # a second run in the same state dir starts clean and says so: nothing counted twice
    second = _run_up(state_dir, tmp_path / "out2.txt", "--duration", "3", "--rate", "50")
    assert "this run starts clean: removing the previous run's data" in " ".join(second.split())
    sent2 = re.search(r"sent ([\d,]+) events and (\d+) malformed", second)
    assert sent2, second
    assert _table(second)["total"] == [sent2[1], sent2[1]]
    assert _wait_gone(state_dir) == []
    assert asyncio.run(_stored(state_dir / "pg")) == (int(sent2[1].replace(",", "")), MALFORMED)


def test_ctrl_c_during_the_simulation_stops_everything_with_130(
    state_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.txt"
    proc = _up(state_dir, out, "--duration", "60", "--rate", "100")
    try:
        _wait_for(out, "Sending", proc, 120)
        _check_endpoints(state_dir)
        # a second stack on the same state dir refuses and leaves the first one alone
        second = subprocess.run(
            [sys.executable, "-m", "monitor.cli", "up", "--state-dir", str(state_dir)],
            cwd=REPO,
            env=_env(state_dir),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert "another `monitor up` is running" in second.stdout
        assert (state_dir / "endpoints.json").exists()
        time.sleep(1)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"monitor up still running 60 s after Ctrl-C:\n{out.read_text()}")
    finally:
        proc.kill()
    output = out.read_text()
    assert code == 130, output
    assert "interrupted" in output and "Traceback" not in output
    assert _wait_gone(state_dir) == []
    assert not (state_dir / "endpoints.json").exists()


def _listening_ports(pids: list[int]) -> set[int]:
    """The TCP ports the processes ``pids`` listen on (their socket inodes in /proc/net/tcp*
    in state LISTEN)."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _check_endpoints(state_dir: Path) -> None:
    """endpoints.json names the worker and the gate (each answers /health as itself) and
    every port the stack's processes listen on, by what listens there."""
    ep = json.loads((state_dir / "endpoints.json").read_text())
    ports = ep["ports"]
    assert set(ports) == {"broker", "postgres", "worker", "gate", "otlp_grpc"}, ep
    assert ep["web_url"] == f"http://127.0.0.1:{ports['worker']}", ep
    assert ep["gate_url"] == f"http://127.0.0.1:{ports['gate']}", ep
    assert ep["kafka_bootstrap"] == f"127.0.0.1:{ports['broker']}", ep
    assert f":{ports['postgres']}/" in ep["database_url"], ep
    worker = httpx.get(f"{ep['web_url']}/health", timeout=5)
    assert worker.status_code == 200 and "maps" not in worker.json(), worker.text
    assert "maps" in httpx.get(f"{ep['gate_url']}/health", timeout=5).json()  # the gate's own
    pids = [int(line.split(":")[0]) for line in _leftovers(state_dir)]
    assert _listening_ports(pids) == set(ports.values()), (ep, _leftovers(state_dir))


def test_rerun_after_a_killed_run_cleans_up_its_leftovers(state_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    proc = _up(state_dir, out, "--duration", "60", "--rate", "50")
    try:
        _wait_for(out, "starting the worker", proc, 120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # no cleanup at all
        proc.wait()
    # the postmaster and the broker outlive it; kill the postmaster too: stale postmaster.pid
    pid = int((state_dir / "pg" / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    assert _leftovers(state_dir), "expected the broker to outlive a SIGKILLed monitor up"

    output = _run_up(state_dir, tmp_path / "out2.txt", "--duration", "3", "--rate", "50")
    assert "left running by an earlier run" in output
    assert f"Dead letters (DLQ): {MALFORMED} stored" in output
    assert _wait_gone(state_dir) == []
