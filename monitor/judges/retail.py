"""The ``retail`` domain shipped with the monitor (entry point ``monitor.domains: retail``).

Its reference is the tau2-bench retail agent policy (``domain_data/retail/policy.md``; source
and MIT licence in ``domain_data/retail/SOURCE.md``); its checks are the retail policy rules
(:mod:`monitor.judges.policy.retail`), one judge per rule. Reads the packaged file when called,
not at import.
"""

from __future__ import annotations

from importlib.resources import files

from monitor.judges.domains import Domain
from monitor.judges.policy.evaluate import RuleSet
from monitor.judges.policy.retail import retail_rules

NAME = "retail"
POLICY = "domain_data/retail/policy.md"


def domain() -> Domain:
    """The retail domain: the tau2-bench retail policy as its reference and its rules."""
    text = (files("monitor.judges") / POLICY).read_text(encoding="utf-8")
    rules = RuleSet(NAME, retail_rules(text), f"monitor.judges:{POLICY}")
    return Domain(NAME, (text,), rules.judges(), (f"monitor.judges:{POLICY}",))
