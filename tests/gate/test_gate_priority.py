"""The gate process's CPU priority (``gate_nice``): its own nice value and, when it leads its
own session (as ``monitor up`` starts it), its session's autogroup's, which is what weighs
against the worker, broker and Postgres in their sessions when the kernel groups by session.

Each case runs ``set_priority`` in a child process (the test's own priority and autogroup
stay) and reads back what the kernel says: ``os.getpriority`` and ``/proc/self/autogroup``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

AUTOGROUP = Path("/proc/self/autogroup")

pytestmark = pytest.mark.skipif(
    not AUTOGROUP.exists() or os.geteuid() != 0,
    reason="needs a kernel with autogroups (/proc/self/autogroup) and root (negative nice)",
)

REPORT = (
    "import json, os; "
    "print(json.dumps({'done': done, 'nice': os.getpriority(os.PRIO_PROCESS, 0), "
    "'autogroup': open('/proc/self/autogroup').read().strip(), "
    "'leader': os.getsid(0) == os.getpid()}))"
)
LOGGING = "import logging, os; logging.basicConfig(level=logging.INFO); "


def child(code: str, *, new_session: bool) -> tuple[dict[str, Any], str]:
    """Run ``code`` (which sets ``done``) then :data:`REPORT` in a child Python: the report
    and the child's log (stderr)."""
    out = subprocess.run(
        [sys.executable, "-c", LOGGING + code + "\n" + REPORT],
        capture_output=True,
        text=True,
        check=True,
        start_new_session=new_session,
        timeout=60,
    )
    return json.loads(out.stdout), out.stderr


def autogroup_nice(line: str) -> int:
    found = re.fullmatch(r"/autogroup-\d+ nice (-?\d+)", line)
    assert found, line
    return int(found.group(1))


def test_a_session_leader_sets_its_autogroup_too() -> None:
    """A gate leading its own session gets the nice value on the process and the autogroup."""
    report, log = child(
        "from monitor.gate.server import set_priority; done = set_priority(-10)", new_session=True
    )
    assert report["leader"] and report["done"], (report, log)
    assert report["nice"] == -10
    assert autogroup_nice(report["autogroup"]) == -10, report
    assert report["autogroup"] != AUTOGROUP.read_text().strip()  # its own, not the test's
    assert "autogroup nice value -10" in log


def test_not_a_session_leader_leaves_the_session_autogroup_and_says_why() -> None:
    """Started inside another session (a shell's, here the test's), only the process's nice
    value is set: the autogroup is the whole session's and stays as it was."""
    before = AUTOGROUP.read_text().strip()
    report, log = child(
        "from monitor.gate.server import set_priority; done = set_priority(7)", new_session=False
    )
    assert not report["leader"] and report["done"], (report, log)
    assert report["nice"] == 7
    assert report["autogroup"] == before == AUTOGROUP.read_text().strip()
    assert "does not lead its own session" in log, log


def test_a_refused_nice_value_is_left_unchanged_and_logged() -> None:
    """Without CAP_SYS_NICE (here: root dropped to nobody after import) a negative value is
    refused: the process and its autogroup stay at 0, with a warning."""
    report, log = child(
        "from monitor.gate.server import set_priority; os.setgid(65534); os.setuid(65534); "
        "done = set_priority(-10)",
        new_session=True,
    )
    assert report["leader"] and not report["done"], (report, log)
    assert report["nice"] == 0
    assert autogroup_nice(report["autogroup"]) == 0
    assert "could not set the nice value -10" in log, log


def test_a_refused_autogroup_value_is_logged() -> None:
    """A process already at -10 that may no longer lower priorities (root dropped to nobody):
    its own nice value stands, the autogroup's write is refused, logged, and left at 0."""
    report, log = child(
        "from monitor.gate.server import set_priority; os.setpriority(os.PRIO_PROCESS, 0, -10); "
        "os.setgid(65534); os.setuid(65534); done = set_priority(-10)",
        new_session=True,
    )
    assert report["leader"] and report["done"], (report, log)
    assert report["nice"] == -10
    assert autogroup_nice(report["autogroup"]) == 0
    assert "could not set the session's autogroup nice value -10" in log, log
