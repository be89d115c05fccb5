"""`monitor report` on a seeded database: the files, the images, and the same numbers as the
CLI's ``--json`` for the same scope and range."""

from __future__ import annotations

import base64
import html
import re
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import pytest
import typer
from typer.testing import CliRunner

from monitor.cli import calibration, escalation, gate, report

PNGS = ("reliability.png", "ece_over_time.png", "escalation_by_bin.png", "threshold_curve.png")


def cli(url: str, *args: str) -> Any:
    app = typer.Typer()
    for module in (calibration, escalation, gate, report):
        module.register(app)
    return CliRunner().invoke(app, list(args), env={"MONITOR_DATABASE_URL": url})


def cells(page: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r'data-key="([^"]+)" data-value="([^"]+)"', page)}


@pytest.fixture
def seeded(seeded_dashboard_url: str) -> str:
    """A database seeded with the dashboards' data (tests/dashboards/seed.py)."""
    return seeded_dashboard_url


def test_report_files_images_and_numbers(seeded: str, tmp_path: Path) -> None:
    import json

    end = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    rng = ["--from", (end - timedelta(hours=4)).isoformat(), "--to", end.isoformat()]
    out = tmp_path / "rep"
    result = cli(seeded, "report", *rng, "--out", str(out))
    assert result.exit_code == 0, result.output
    page_path = out / "report.html"
    assert f"report written to {page_path}" in result.output.replace("\n", "")
    page = page_path.read_text()
    for name in PNGS:
        png = (out / name).read_bytes()
        image = mpimg.imread(out / name)
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 400, name
        assert base64.b64encode(png).decode() in page, f"{name} is not embedded"
    assert 'src="http' not in page and "<link" not in page  # self-contained

    got = cells(page)
    cal = json.loads(cli(seeded, "calibration", *rng, "--json").output)["agents"]
    assert len(cal) == 8  # 4 simulated, 3 gated (tests/dashboards/seed_gate.py), all
    for agent, r in cal.items():
        for field in ("count", "ece", "mce", "brier", "accuracy", "mean_confidence"):
            # equal to 1e-12: Postgres sums float8 rows in no guaranteed order, so two queries
            # over the same rows may differ in the last bits (seen: ...234 vs ...24 in CI)
            want = pytest.approx(r[field], rel=1e-12, abs=1e-15)
            assert got[f"calibration/{agent}/{field}"] == want, (agent, field)
    esc = json.loads(cli(seeded, "escalation", *rng, "--json").output)["agents"]
    assert esc
    for agent, s in esc.items():
        for b in s["bins"]:
            if b["n"]:
                assert got[f"escalation/{agent}/{b['index']}/n"] == b["n"]
                assert got[f"escalation/{agent}/{b['index']}/rate"] == b["rate"]
    thr = json.loads(cli(seeded, "thresholds", *rng, "--json").output)["agents"]
    assert thr
    for agent, t in thr.items():
        for i, row in enumerate(t["rows"]):
            assert got[f"thresholds/{agent}/{i}/threshold"] == row["threshold"]
            assert got[f"thresholds/{agent}/{i}/escalation_rate"] == row["escalation_rate"]
            key = f"thresholds/{agent}/{i}/residual_failure_rate"
            assert got.get(key) == row["residual_failure_rate"], key
    # the text a person reads shows the same numbers, rounded
    ece = cal["sim-retail-overconfident"]["ece"]
    assert f">{ece:.4f}</td>" in page
    # drift checks and firing alerts are listed
    text = html.unescape(page)
    assert text.count("FIRED: ") >= 1 and "sim-telecom-drifting" in text
    assert "escalation_inverted" in text and "ece_tier1" in text
    assert "drift for sim-telecom" not in text.split("Firing alerts")[1]  # resolved: not firing
    # the incidents the alerts opened (tests/dashboards/seed.py: one per alert), the resolved
    # one too (it was open in the range)
    shown = text.split("<h2>Incidents (2 open)</h2>")[1].split("</table>")[0]
    assert shown.count("<tr><td>inc-") == 3 and shown.count("<td>resolved</td>") == 1
    assert "escalation_inverted (1 firing)" in shown and "1 (+0 updates)" in shown
    # for a person with two minutes: health per agent, then alerts, then charts, full tables
    # last, folded
    order = [
        page.index(h)
        for h in (
            "<h2>Health per agent</h2>",
            "<h2>Firing alerts (",
            "<h2>Charts per agent</h2>",
            "<h2>Full tables</h2>",
        )
    ]
    assert order == sorted(order)
    first_screen = html.unescape(page[order[0] : order[1]])
    assert re.search(
        r'<div class="card act"><span class="badge act">ACT</span>'
        r'<a class="agent" href="#agent-sim-airline-inverted">',
        first_screen,
    )
    assert "critical alert escalation_inverted" in first_screen
    assert "<b>Act on sim-airline-inverted" in first_screen
    tail = page[order[3] :]
    gate_at = page.index("<h2>Runtime trust gate</h2>")
    assert order[1] < gate_at < order[2]  # after the alerts: what the gate prevents and costs
    assert tail.count("<details>") == 5 and "data-key=" not in page[: order[1]]
    # before the gate section only the alert table's numbers carry exact values
    keys = re.findall(r'data-key="([^"]+)"', page[:gate_at])
    assert keys and all(k.startswith("alerts/") for k in keys)
    assert "data-key=" not in page[page.index("<h2>Charts per agent</h2>") : order[3]]
    # the gate section: `monitor gate --json --no-replay`, per agent x domain
    effects = json.loads(cli(seeded, "gate", *rng, "--json", "--no-replay").output)["effects"]
    assert {e["agent_id"] for e in effects} == {
        "sim-gated-airline",
        "sim-gated-retail",
        "sim-gated-ignores",
    }
    # every 5th gated conversation was decided in shadow mode: reported apart, with outcomes
    assert sorted(e["source"] for e in effects) == ["recorded"] * 3 + ["shadow"] * 3
    shadow_at = page.index("<h3>Shadow decisions (not enforced)</h3>")
    for e in effects:
        prefix = "gate-shadow" if e["source"] == "shadow" else "gate"
        k = f"{prefix}/{e['agent_id']}/{e['domain']}"
        assert (page.index(f'data-key="{k}/conversations"') > shadow_at) is (prefix != "gate")
        assert got[f"{k}/conversations"] == e["conversations"] > 10
        for d in ("proceed", "revise", "escalate"):
            assert got[f"{k}/decisions/{d}"] == e["decisions"][d]
        for f in (
            "escalation_rate",
            "failures_prevented",
            "failure_rate_proceeded",
            "failure_rate_all",
        ):
            assert got[f"{k}/{f}"] == e[f]["value"], (k, f)
        if e["source"] == "shadow":
            continue
        assert got[f"{k}/revise_failure_rate"] == e["revise_failure_rate"]["value"]
        # every 7th conversation of the gated agents did not ask: the ungated baseline
        assert e["ungated_conversations"] > 5
        assert got[f"{k}/failure_rate_ungated"] == e["failure_rate_ungated"]["value"]
        r = e["failures_prevented"]
        assert f"{r['low']:.3f}-{r['high']:.3f} ({r['k']}/{r['n']})" in page
    shadow = [e for e in effects if e["source"] == "shadow"]
    # what enforcing would have prevented and cost, from the shadow conversations' outcomes
    assert sum(e["failures_prevented"]["k"] for e in shadow) > 0
    assert sum(e["decisions"]["escalate"] for e in shadow) > 0
    for agent in (
        "sim-airline-inverted",
        "sim-retail-overconfident",
        "sim-telecom-drifting",
        "sim-airline-calibrated",
    ):
        for kind in ("reliability", "ece_over_time", "escalation_by_bin", "threshold_curve"):
            png = (out / f"agent-{agent}-{kind}.png").read_bytes()
            assert base64.b64encode(png).decode() in page[order[2] : order[3]], (agent, kind)
    assert "<meta name='viewport'" in page


def test_scoped_report_and_empty_range(seeded: str, tmp_path: Path) -> None:
    end = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    scoped = cli(
        seeded,
        "report",
        "--agent",
        "sim-airline-*",
        "--from",
        (end - timedelta(hours=4)).isoformat(),
        "--to",
        end.isoformat(),
        "--out",
        str(tmp_path / "a"),
    )
    assert scoped.exit_code == 0, scoped.output
    keys = cells((tmp_path / "a" / "report.html").read_text())
    agents = {k.split("/")[1] for k in keys if k.startswith("calibration/")}
    assert agents == {"sim-airline-calibrated", "sim-airline-inverted", "*"}
    # no agent of the scope asked the gate: the report says nothing about it
    assert "Runtime trust gate" not in (tmp_path / "a" / "report.html").read_text()
    gated = cli(
        seeded,
        "report",
        "--agent",
        "sim-gated-*",
        "--from",
        (end - timedelta(hours=4)).isoformat(),
        "--to",
        end.isoformat(),
        "--out",
        str(tmp_path / "g"),
    )
    assert gated.exit_code == 0, gated.output
    keys = cells((tmp_path / "g" / "report.html").read_text())
    assert {k.split("/")[1] for k in keys if k.startswith("gate/")} == {
        "sim-gated-airline",
        "sim-gated-retail",
        "sim-gated-ignores",
    }
    old = cli(
        seeded,
        "report",
        "--from",
        "2001-01-01T00:00:00+00:00",
        "--to",
        "2001-01-02T00:00:00+00:00",
        "--out",
        str(tmp_path / "b"),
    )
    assert old.exit_code == 0, old.output
    for name in PNGS:
        assert mpimg.imread(tmp_path / "b" / name).ndim == 3


async def test_ece_over_time_divides_the_span_of_the_data(seeded: str) -> None:
    """A day's range over a few hours of traffic: about 30 points per agent, not the 3 or 4
    that 48-minute buckets over the whole day would give."""
    from monitor.analytics.repo import Segment
    from monitor.report.write import ece_over_time
    from monitor.store.engine import make_engine

    end = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    engine = make_engine(seeded)
    try:
        series = await ece_over_time(engine, Segment(), end - timedelta(days=1), end)
    finally:
        await engine.dispose()
    assert series
    for agent, points in series.items():
        assert len(points) >= 20, (agent, len(points))
        steps = {b - a for (a, _), (b, _) in pairwise(points)}
        assert min(steps) < timedelta(minutes=48), agent
