"""Exemplars, pure: the pick rule of every metric (and the runbook states each), ranks, the
drift bins that moved, reasons on one line and redacted before they are cut, and what the
sinks render from a payload that carries them (links, commands, redaction)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from monitor.alerts.exemplars import (
    PICK_RULES,
    Exemplar,
    alternate,
    bin_moves,
    conversation_command,
    conversation_link,
    moved_bins,
    payload_exemplars,
    pick_for,
    quoted,
    ranked,
    with_links,
)
from monitor.alerts.grouping import GroupedNotification
from monitor.alerts.metrics import Metric
from monitor.alerts.sinks.alertmanager import alertmanager_alerts
from monitor.alerts.sinks.slack_blocks import render_message, scrub_payload
from tests.servers.alert_servers import notification

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks.md"
DASH = "http://grafana.example:3000/"
RAW = "refund sent to jane.doe@example.com, password=hunter2, key sk-live-0123456789abcdefghijk"


def test_every_metric_has_a_pick_rule_and_the_runbook_states_it() -> None:
    text = " ".join(RUNBOOKS.read_text().split())
    for metric in Metric:
        rule = PICK_RULES[pick_for(metric)]
        assert " ".join(rule.split()) in text, f"docs/runbooks.md does not state: {rule}"


def test_reasons_are_one_line_redacted_before_they_are_cut() -> None:
    e = Exemplar("c1", "failed at confidence 0.99" + quoted("line one\n\n  " + RAW))
    assert "\n" not in e.reason and len(e.reason) <= 200
    assert "[email]" in e.reason and "password=[secret]" in e.reason
    assert "hunter2" not in e.reason and "sk-live" not in e.reason
    # cut at 80 characters: the key after the cut is gone whole, not half
    long = quoted("x" * 70 + " sk-live-0123456789abcdefghijk and more")
    assert "sk-" not in long and long.endswith('…"')
    assert Exemplar("c", "a" * 300).reason == "a" * 199 + "…"
    detail = Exemplar("c", "r", {"e": {"text": RAW}}).without_secrets().detail
    assert detail == {
        "e": {
            "text": RAW.replace("hunter2", "[secret]").replace(
                "sk-live-0123456789abcdefghijk", "[secret]"
            )
        }
    }


def test_ranked_keeps_one_per_conversation_up_to_the_limit() -> None:
    found = [Exemplar("a", "1"), Exemplar("a", "2"), Exemplar(None, "dl"), Exemplar(None, "dl2")]
    found += [Exemplar("b", "3"), Exemplar("c", "4")]
    got = ranked(found, 3)
    assert [(e.rank, e.conversation_id, e.reason) for e in got] == [
        (1, "a", "1"),
        (2, None, "dl"),
        (3, None, "dl2"),
    ]
    assert [e.conversation_id for e in ranked(found, 10)] == ["a", None, None, "b", "c"]
    assert ranked(found, 0) == []
    first, second = [Exemplar("e1", "x"), Exemplar("e2", "x")], [Exemplar("m1", "y")]
    assert [e.conversation_id for e in alternate(first, second)] == ["e1", "m1", "e2"]


def _sums(conf: list[float], y: list[int]):  # type: ignore[no-untyped-def]
    from monitor.analytics.bins import BinSums

    return BinSums.from_items(np.array(conf), np.array(y, dtype=float))


def test_moved_bins_orders_by_the_fall_of_accuracy_else_by_the_growth_of_share() -> None:
    ref = _sums(
        [0.95] * 100 + [0.75] * 100 + [0.35] * 50,
        [1] * 90 + [0] * 10 + [1] * 75 + [0] * 25 + [1] * 20 + [0] * 30,
    )
    # 0.9-1.0 falls 0.90 -> 0.50, 0.7-0.8 falls 0.75 -> 0.70, 0.3-0.4 rises
    rec = _sums(
        [0.95] * 100 + [0.75] * 100 + [0.35] * 50,
        [1] * 50 + [0] * 50 + [1] * 70 + [0] * 30 + [1] * 40 + [0] * 10,
    )
    bins, by_accuracy = moved_bins(bin_moves(ref, rec))
    assert by_accuracy and [m.bin for m in bins] == [9, 7]
    assert bins[0].accuracy_reference == pytest.approx(0.9)
    assert bins[0].accuracy_recent == pytest.approx(0.5)
    assert bins[0].label() == "0.9-1.0"
    # the same accuracy everywhere, more traffic at 0.3-0.4: the bins that grew
    ref2 = _sums([0.95] * 100 + [0.35] * 20, [1] * 90 + [0] * 10 + [1] * 7 + [0] * 13)
    rec2 = _sums([0.95] * 100 + [0.35] * 100, [1] * 90 + [0] * 10 + [1] * 35 + [0] * 65)
    bins2, by_accuracy2 = moved_bins(bin_moves(ref2, rec2))
    assert not by_accuracy2 and [m.bin for m in bins2] == [3]
    # bins with fewer than 5 effective items in a window never count as fallen
    thin = _sums([0.95] * 4, [0] * 4)
    assert moved_bins(bin_moves(ref, thin))[1] is False


def test_links_and_commands() -> None:
    assert (
        conversation_link(DASH, "tau2:ab/c d")
        == "http://grafana.example:3000/d/monitor-conversation?var-conversation=tau2%3Aab%2Fc+d"
    )
    assert conversation_command("tau2:abc-1") == "monitor conversation tau2:abc-1"
    assert conversation_command("it's") == "monitor conversation 'it'\"'\"'s'"


def _payload(kind: str = "firing") -> tuple[dict[str, object], str]:
    n = notification(kind=kind)
    payload: dict[str, object] = n.to_dict()
    payload["exemplars"] = {
        n.episode: [
            {"rank": 2, "conversation_id": "conv-2", "reason": "second"},
            {"rank": 1, "conversation_id": "conv-1", "reason": RAW},
        ],
        "other:episode": [{"rank": 1, "conversation_id": "x", "reason": "not this alert"}],
    }
    return payload, n.episode


def test_payload_exemplars_by_episode_and_rank() -> None:
    payload, episode = _payload()
    assert [x["conversation_id"] for x in payload_exemplars(payload, episode)] == [
        "conv-1",
        "conv-2",
    ]
    assert payload_exemplars(payload, "missing") == []
    assert payload_exemplars({"exemplars": "garbage"}, episode) == []
    linked = with_links(payload, DASH)
    first = payload_exemplars(linked, episode)[0]
    assert first["link"] == conversation_link(DASH, "conv-1")
    assert first["command"] == "monitor conversation conv-1"
    assert "link" not in payload_exemplars(with_links(payload, None), episode)[0]


def _no_leak(text: str) -> None:
    for leaked in ("jane.doe@example.com", "hunter2", "sk-live-0123456789abcdefghijk"):
        assert leaked not in text


def test_slack_lists_the_exemplars_with_link_and_command_redacted() -> None:
    payload, _ = _payload()
    msg = render_message(payload, DASH)
    section = next(
        b for b in msg["blocks"] if b.get("text", {}).get("text", "").startswith("*Examples*")
    )
    lines = section["text"]["text"].split("\n")[1:]
    assert lines[0].startswith("• `conv-1` refund sent to [email], password=[secret]")
    assert f"<{conversation_link(DASH, 'conv-1')}|Conversation>" in lines[0]
    assert lines[0].endswith("`monitor conversation conv-1`")
    assert lines[1].startswith("• `conv-2` second")
    assert "not this alert" not in str(msg)
    _no_leak(str(msg))
    # in a group, under its member; none for a resolution
    n = notification()
    grouped = GroupedNotification("group:x", "agent=billing", {}, (n,), n.created_at)
    gp = {**grouped.to_dict(), "exemplars": payload["exemplars"]}
    text = str(render_message(gp, DASH))
    assert "monitor conversation conv-1" in text and "[secret]" in text
    _no_leak(text)
    resolved, _ = _payload("resolved")
    assert "Examples" not in str(render_message(resolved, DASH))


def test_webhook_body_and_alertmanager_annotation_carry_them_redacted() -> None:
    payload, episode = _payload()
    body = scrub_payload(with_links(payload, DASH))
    first = body["exemplars"][episode][0]  # type: ignore[index]
    assert (
        first["conversation_id"] == "conv-1" and first["command"] == "monitor conversation conv-1"
    )
    assert first["link"] == conversation_link(DASH, "conv-1")
    assert "[email]" in first["reason"]
    _no_leak(str(body))
    now = datetime(2026, 3, 1, 13, tzinfo=UTC)
    [alert] = alertmanager_alerts(payload, DASH, now, timedelta(hours=12))
    lines = alert["annotations"]["exemplars"].split("\n")
    assert lines[0] == (
        "conv-1: refund sent to [email], password=[secret], key [secret] | "
        f"{conversation_link(DASH, 'conv-1')} | monitor conversation conv-1"
    )
    assert re.match(r"conv-2: second \| http", lines[1])
    _no_leak(str(alert))
