"""The repository is self-contained: nothing the suite, the demo or a benchmark runs reads a
path outside the clone (a fresh clone with nothing beside it must pass).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# a path that climbs out of the repository: a string starting with "../", or a join onto the
# repository's parent folder (REPO.parent / ..., ROOT.parent / ...)
OUTSIDE = re.compile(r"""["']\.\./|\b(?:REPO|ROOT)\.parent\s*/""")


def test_no_code_reads_beside_the_repository() -> None:
    offenders = []
    for folder in ("monitor", "tests", "bench"):
        for path in (REPO / folder).rglob("*.py"):
            if path.name == Path(__file__).name:
                continue
            for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if OUTSIDE.search(line):
                    offenders.append(f"{path.relative_to(REPO)}:{no}: {line.strip()}")
    assert offenders == []


# a pointer to a document that is not in the repository (the design lives in docs/design.md) or
# to the tracker's history instead of a reason: an issue number, "#12"
NOT_HERE = re.compile(r"\bDESIGN\b(?!_)|\b[Ii]ssues?\s*#?\d+|\(#\d+\)")


def test_monitor_points_only_at_documents_in_the_repository_and_cites_no_issue() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{no}: {line.strip()}"
        for path in sorted((REPO / "monitor").rglob("*.py"))
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if NOT_HERE.search(line.replace("docs/design.md", ""))
    ]
    assert offenders == []


def test_the_outside_pointer_pattern_catches_what_it_is_for() -> None:
    for line in ("ECE as DESIGN §4", "see DESIGN.md", "(fixes issue 31)", "see #12 (#12)"):
        assert NOT_HERE.search(line), line
    for line in ("DESIGN_CTES = ...", "docs/design.md", "a design effect", "tier 3"):
        assert not NOT_HERE.search(line.replace("docs/design.md", "")), line


def test_tau2_data_is_committed_with_its_source_and_licence() -> None:
    folder = REPO / "tests" / "data" / "tau2"
    files = sorted(p.name for p in folder.glob("*.json"))
    assert files == [
        "airline_gemini2_5_flash_10tasks_2t.json",
        "airline_gemini2_5_flash_10tasks_2t_retry_agent.json",
    ]
    for name in files:
        doc = json.loads((folder / name).read_text(encoding="utf-8"))
        assert {"info", "tasks", "simulations"} <= doc.keys()
        assert len(doc["simulations"]) == 20  # 10 tasks x 2 trials, as published
    note = (REPO / "tests" / "data" / "README.md").read_text(encoding="utf-8")
    assert "MIT" in note and "jitrc/tau2-enhanced" in note and "4b23a7edc99c" in note
