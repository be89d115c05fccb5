"""The threshold advisor: hand-computed answers on built data with ties, pure and via the CLI.

Ten conversations, minimum confidences 0.1 0.2 0.3 0.3 0.3 0.5 0.6 0.7 0.8 0.9; failed: 0.1,
0.2, the first 0.3 and 0.6 (4 of 10). By hand:

- keep 0.8 (= budget 0.2): cut 0.3 escalates 0.1 and 0.2 (share 0.2; cut 0.5 would be 0.5);
  kept 8 with 2 failures -> residual 0.25; failures prevented 2 / 4 = 0.5; error rate reduced
  1 - 0.25 / 0.4 = 0.375; three conversations tie at 0.3 (escalating them too: share 0.5).
- target 0.2 alone: cut 0.3 leaves 0.25, cut 0.5 leaves 1 failure in 5 = 0.2 -> 0.5.
- target 0.2 within budget 0.2: nothing qualifies.
"""

from __future__ import annotations

import asyncio
import json
import math
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from monitor.analytics.advisor import advise
from monitor.analytics.escalation import ConversationEscalation as Conv
from monitor.cli.main import app
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from tests.factories import T0, event

CONF = [0.1, 0.2, 0.3, 0.3, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9]
FAILED = {0, 1, 2, 6}
CONVS = [Conv(c, False, i not in FAILED) for i, c in enumerate(CONF)]
Z = 1.959963984540054


def wilson(p: float, n: float) -> tuple[float, float]:
    """Independent Wilson score interval (95 %)."""
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z / (1 + Z * Z / n) * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return centre - half, centre + half


def test_keep_and_budget_hand_computed_with_ties() -> None:
    for adv in (advise(CONVS, keep=0.8), advise(CONVS, budget=0.2)):
        assert adv.threshold == 0.3 and adv.n_escalated == 2 and adv.tied_at_cut == 3
        assert adv.escalated_share is not None and adv.escalated_share.value == pytest.approx(0.2)
        assert adv.escalated_share_with_ties == pytest.approx(0.5)
        res = adv.residual_error
        assert res is not None and res.value == pytest.approx(0.25) and res.n_eff == 8
        assert (res.low, res.high) == pytest.approx(wilson(0.25, 8))
        prevented = adv.failures_prevented
        assert prevented is not None and prevented.value == pytest.approx(0.5)
        assert (prevented.low, prevented.high) == pytest.approx(wilson(0.5, 4))
        assert adv.error_rate_reduction == pytest.approx(0.375)
        assert adv.base_error is not None and adv.base_error.value == pytest.approx(0.4)
    assert advise(CONVS, keep=0.8).question == "keep 0.8"


def test_target_alone_and_with_budget() -> None:
    adv = advise(CONVS, target=0.2)
    assert adv.threshold == 0.5 and adv.n_escalated == 5 and adv.tied_at_cut == 1
    assert adv.residual_error is not None and adv.residual_error.value == pytest.approx(0.2)
    assert adv.failures_prevented is not None
    assert adv.failures_prevented.value == pytest.approx(0.75)
    none = advise(CONVS, target=0.2, budget=0.2)
    assert none.threshold is None and "within an escalated share of 0.2" in none.reason
    both = advise(CONVS, target=0.25, keep=0.8)
    assert both.threshold == 0.3 and both.question == "keep 0.8, target 0.25"
    assert advise(CONVS, keep=1.0).n_escalated == 0  # keep everything: the lowest cut


def test_weights_and_validation() -> None:
    # weight 3 on the first conversation: it alone is 3 / 12 = 0.25 of the traffic
    weighted = [Conv(0.1, False, False, 3.0), *CONVS[1:]]
    adv = advise(weighted, budget=0.25)
    assert adv.threshold == 0.2 and adv.escalated_share is not None
    assert adv.escalated_share.value == pytest.approx(0.25)
    assert adv.escalated_share.n_eff == pytest.approx(12**2 / (9 + 9))
    with pytest.raises(ValueError):
        advise(CONVS)
    with pytest.raises(ValueError):
        advise(CONVS, keep=0.8, budget=0.2)
    assert advise([], keep=0.8).threshold is None


async def test_cli_keep_json_on_stored_conversations(database_url: str) -> None:
    events = []
    for i, (c, conv) in enumerate(zip(CONF, CONVS, strict=True)):
        cid = f"adv-{i}"
        events.append(event(f"{cid}:0", cid, "message", at=i * 10, agent="adv", confidence=c))
        events.append(
            event(
                f"{cid}:1",
                cid,
                "message",
                at=i * 10 + 1,
                agent="adv",
                confidence=min(1.0, c + 0.05),
            )
        )  # the minimum is c
        events.append(
            event(
                f"{cid}:2",
                cid,
                "outcome",
                at=i * 10 + 2,
                agent="adv",
                success=conv.success,
                reward=1.0 if conv.success else 0.0,
            )
        )
    w = EventWriter(database_url)
    try:
        await w.write([event_row(e) for e in events])
    finally:
        await w.close()
    hi = (T0 + timedelta(hours=1)).isoformat()

    def run(*opts: str) -> dict:
        args = ["thresholds", "--from", T0.isoformat(), "--to", hi, "--agent", "adv", *opts]
        result = CliRunner().invoke(
            app, [*args, "--json"], env={"MONITOR_DATABASE_URL": database_url}
        )
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["agents"]["adv"]

    adv = (await asyncio.to_thread(run, "--keep", "0.8"))["advice"]
    assert adv["threshold"] == 0.3 and adv["tied_at_cut"] == 3
    assert adv["residual_error"]["value"] == pytest.approx(0.25)
    assert [adv["residual_error"]["low"], adv["residual_error"]["high"]] == pytest.approx(
        list(wilson(0.25, 8))
    )
    assert adv["escalated_share"]["value"] == pytest.approx(0.2)
    assert adv["failures_prevented"]["value"] == pytest.approx(0.5)
    target = (await asyncio.to_thread(run, "--target", "0.2"))["advice"]
    assert target["threshold"] == 0.5
    table_only = await asyncio.to_thread(run)
    assert table_only["advice"] is None and table_only["rows"]
    text = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["thresholds", "--from", T0.isoformat(), "--to", hi, "--budget", "0.2"],
        env={"MONITOR_DATABASE_URL": database_url},
    )
    assert text.exit_code == 0 and "budget 0.2" in text.output
    assert "None" not in text.output and "ties at the cut" in text.output
