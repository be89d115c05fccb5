"""The ``airline`` domain shipped with the monitor (entry point ``monitor.domains: airline``).

Its reference is the tau2-bench airline agent policy (``domain_data/airline/policy.md``; source
and MIT licence in ``domain_data/airline/SOURCE.md``): the baggage fees, insurance price,
compensation amounts and the simulated "current time" an airline agent quotes from its policy
are supported figures, not fabrications. Its checks are the airline policy rules
(:mod:`monitor.judges.policy.airline`), one judge per rule. Reads the packaged file when
called, not at import.
"""

from __future__ import annotations

from importlib.resources import files

from monitor.judges.domains import Domain
from monitor.judges.policy.airline import airline_rules
from monitor.judges.policy.evaluate import RuleSet

NAME = "airline"
POLICY = "domain_data/airline/policy.md"


def domain() -> Domain:
    """The airline domain: the tau2-bench airline policy as its reference and its rules."""
    text = (files("monitor.judges") / POLICY).read_text(encoding="utf-8")
    rules = RuleSet(NAME, airline_rules(text), f"monitor.judges:{POLICY}")
    return Domain(NAME, (text,), rules.judges(), (f"monitor.judges:{POLICY}",))
