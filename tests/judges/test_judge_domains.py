"""Domain plugins: the shipped airline domain (entry point), a config directory, and what they
change on the committed tau2 airline runs (tests/data/tau2/)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from monitor.config import Settings
from monitor.contract.events import AgentEvent
from monitor.core.errors import ConfigError
from monitor.judges.base import Conversation, Verdict
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.domains import Domain, _from_entry_point, load_domains
from monitor.judges.worker import JudgeRunner
from monitor.replay.tau2 import tau2_file_events

# figures an airline agent quotes from its policy ($50 a bag, $30 insurance, "today")
POLICY_FIGURES = {
    ("tau2:f04708e3-7b2d-48ec-9878-b60251dc54bd:6", "$50"),
    ("tau2:d82da758-cd94-4f2f-b9ce-b4b9496a3fd4:18", "$30"),
    ("tau2:71f463c8-7725-4b01-838d-18e76fd959de:22", "2024-05-15"),
}


def test_airline_domain_is_registered_by_entry_point(tau2_files: list[Path]) -> None:
    domains = load_domains()
    airline = domains["airline"]
    policy = json.loads(tau2_files[0].read_text())["info"]["environment_info"]["policy"]
    assert airline.references == (policy,)
    assert "domain_data/airline/policy.md" in airline.sources[0]
    assert len(airline.fingerprint()) == 12


def test_directory_domains_merge_with_plugins(tmp_path: Path) -> None:
    (tmp_path / "airline").mkdir()
    (tmp_path / "airline" / "fees.md").write_text("Seat selection costs $25.")
    (tmp_path / "telecom").mkdir()  # a domain no plugin ships
    (tmp_path / "telecom" / "b.txt").write_text("Shipping is $7.")
    (tmp_path / "telecom" / "a.md").write_text("Returns within 30 days.")
    (tmp_path / "telecom" / "ignored.json").write_text("{}")
    domains = load_domains(tmp_path)
    assert domains["airline"].references[1:] == ("Seat selection costs $25.",)
    assert domains["telecom"].references == ("Returns within 30 days.", "Shipping is $7.")
    only_dir = load_domains(tmp_path, plugins=dict)
    assert set(only_dir) == {"airline", "telecom"} and len(only_dir["airline"].references) == 1
    with pytest.raises(ConfigError):
        load_domains(tmp_path / "missing")
    assert _from_entry_point("bad", lambda: "not a domain") is None
    assert _from_entry_point("ok", Domain("x")) == Domain("x")
    settings = Settings(_env_file=None, domains_dir=tmp_path)  # type: ignore[call-arg]
    assert settings.domains_dir == tmp_path and settings.judge_precision_floor == 0.7


def _figure_flags(runner: JudgeRunner, files: list[Path]) -> tuple[set[tuple[str, str]], int]:
    convs: dict[str, list[AgentEvent]] = {}
    for path in files:
        for e in tau2_file_events(path):
            convs.setdefault(e.conversation_id, []).append(e)
    verdicts: list[Verdict] = []
    for events in convs.values():
        verdicts += asyncio.run(runner.run(Conversation.of(events), set()))
    flags = {
        (v.item_id or "", u["text"])
        for v in verdicts
        if v.judge == "det.unsupported_figure"
        for u in v.evidence["unsupported"]
    }
    return flags, sum(1 for v in verdicts if v.judge == "det.unsupported_figure" and not v.label)


def test_airline_reference_removes_policy_price_false_flags(tau2_files: list[Path]) -> None:
    bare, bare_fails = _figure_flags(JudgeRunner(deterministic_judges()), tau2_files)
    with_domain, fails = _figure_flags(
        JudgeRunner(deterministic_judges(), domains=load_domains()), tau2_files
    )
    assert bare >= POLICY_FIGURES  # without the reference: flagged
    assert not POLICY_FIGURES & with_domain  # with the airline domain: supported
    assert with_domain < bare
    # what remains flagged are the two messages read by hand (test_judges_deterministic)
    assert fails == 2 and bare_fails == 9
    assert {t for _, t in with_domain} == {"$171", "$477", "May 10th"}


def test_domain_checks_run_on_their_domain_only(tau2_files: list[Path]) -> None:
    class Always:
        name, version, applies_to = "airline.always", "1", "airline conversations"

        def judge(self, conversation: Conversation) -> list[Verdict]:
            return [Verdict(self.name, self.version, conversation.conversation_id, None, label=1)]

    runner = JudgeRunner(
        deterministic_judges(), domains={"airline": Domain("airline", (), (Always(),))}
    )
    events = [e for e in tau2_file_events(tau2_files[0])]
    conv = Conversation.of([e for e in events if e.conversation_id == events[0].conversation_id])
    assert "airline.always" in [j.name for j in runner.judges_for(conv)]
    other = Conversation.of([e.model_copy(update={"context": None}) for e in conv.events])
    assert "airline.always" not in [j.name for j in runner.judges_for(other)]
