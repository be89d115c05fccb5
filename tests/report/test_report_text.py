"""`monitor report` draws every label as text: ids in matplotlib's math syntax do not break it."""

from __future__ import annotations

import asyncio
import html
from datetime import UTC, datetime, timedelta
from pathlib import Path

from monitor.contract.events import validate_event
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from tests.factories import event_dict
from tests.report.test_report import cli

MATH_AGENT = "$x^2$"  # matplotlib math syntax
BROKEN_MATH = "$\\frac{$"  # math that matplotlib cannot even parse


def test_math_syntax_in_ids_is_drawn_as_text(database_url: str, tmp_path: Path) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    rows = []
    for i in range(40):
        for agent, domain in ((MATH_AGENT, "$\\alpha$"), (BROKEN_MATH, "$_$")):
            conv = f"{agent}-c{i}"
            at = {"at": 0.0, "context": {"domain": domain, "tier": 2}, "agent": agent}
            msg = event_dict(f"{conv}-m", conv, "message", confidence=(i % 10) / 10 + 0.05, **at)
            out = event_dict(f"{conv}-o", conv, "outcome", success=i % 3 != 0, **at)
            for d in (msg, out):
                d["ts"] = (start + timedelta(seconds=i * 30)).isoformat()
                d["agent"]["version"] = "$v^1$"
                rows.append(event_row(validate_event(d)))

    async def write() -> None:
        writer = EventWriter(database_url)
        try:
            await writer.write(rows)
        finally:
            await writer.close()

    asyncio.run(write())
    end = start + timedelta(hours=2)
    out_dir = tmp_path / "rep"
    rng = ["--from", start.isoformat(), "--to", end.isoformat()]
    result = cli(database_url, "report", *rng, "--out", str(out_dir))
    assert result.exit_code == 0, result.output
    page = (out_dir / "report.html").read_text()
    assert html.escape(MATH_AGENT) in page and html.escape(BROKEN_MATH) in page
    pngs = sorted(p.name for p in out_dir.glob("*.png"))
    assert "reliability.png" in pngs
    assert len([p for p in pngs if p.startswith("agent--x-2--")]) == 4, pngs
