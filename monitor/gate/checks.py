"""The inline checks the gate runs, built once per (checks, domain) and reused (pure).

The deterministic judges (:mod:`monitor.judges.deterministic`) are selected by name; the figure
judge gets the domain's reference texts; ``domain`` in a rule's checks adds the domain plugins'
own judges (:mod:`monitor.judges.domains`). Building a judge set (e.g. indexing a domain's
references) happens at the first request that needs it, never again.

:func:`verdicts_on` asks a judge about the proposed message only: the deterministic judges
then build no verdict for the earlier messages (the same verdicts on the proposal as a full
run, see :meth:`~monitor.judges.det_base.DeterministicJudge.judge`); a domain plugin's judge
runs in full and its verdicts on other items are ignored by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping

from monitor.gate.policy import DOMAIN_CHECKS
from monitor.judges.base import Conversation, Judge, Verdict
from monitor.judges.det_base import DeterministicJudge
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.domains import Domain


class CheckSet:
    """Judge instances per (selected checks, domain); ``domains`` are the loaded plugins."""

    def __init__(self, domains: Mapping[str, Domain] | None = None) -> None:
        self.domains = dict(domains or {})
        self._cache: dict[tuple[tuple[str, ...], str | None], tuple[Judge, ...]] = {}

    def judges(self, names: tuple[str, ...], domain: str | None) -> tuple[Judge, ...]:
        """The judges named in ``names`` (and the domain's own with ``domain`` listed)."""
        key = (names, domain)
        found = self._cache.get(key)
        if found is None:
            plugin = self.domains.get(domain) if domain else None
            refs = plugin.references if plugin is not None else ()
            chosen = [j for j in deterministic_judges(refs) if j.name in names]
            if DOMAIN_CHECKS in names and plugin is not None:
                chosen.extend(plugin.judges)
            found = self._cache[key] = tuple(chosen)
        return found


def verdicts_on(
    judge: Judge, conversation: Conversation, item_id: str, calls: bool = True
) -> list[Verdict]:
    """``judge``'s verdicts on ``conversation``, built for ``item_id`` only when the judge
    supports it (the caller keeps the verdicts on ``item_id`` and the errors either way).
    ``calls`` False: the message ``item_id`` calls no tool, so a deterministic judge of tool
    calls alone (``judges_calls_only``) is not run: it would give no verdict."""
    if isinstance(judge, DeterministicJudge):
        if not calls and judge.judges_calls_only:
            return []
        return judge.judge(conversation, only=item_id)
    return judge.judge(conversation)
