"""The ``airline`` domain shipped with the monitor (entry point ``monitor.domains: airline``).

Its reference is the tau2-bench airline agent policy (``domain_data/airline/policy.md``; source
and MIT licence in ``domain_data/airline/SOURCE.md``): the baggage fees, insurance price,
compensation amounts and the simulated "current time" an airline agent quotes from its policy
are supported figures, not fabrications. Its checks are the airline policy rules
(:mod:`monitor.judges.policy.airline`), one judge per default rule. Reads the packaged file
when called, not at import.

:func:`opt_in` is the same domain with only the opt-in rules (``Rule.default`` false: the rules
whose precision on tau2 runs held apart from their development fell below the judges'
precision floor; figures in docs/benchmarks.md); a deployment adds it as
:func:`monitor.judges.retail.opt_in` says.
"""

from __future__ import annotations

from importlib.resources import files

from monitor.judges.domains import Domain
from monitor.judges.policy.airline import airline_rules
from monitor.judges.policy.evaluate import RuleSet

NAME = "airline"
POLICY = "domain_data/airline/policy.md"


def _rules() -> tuple[str, RuleSet]:
    text = (files("monitor.judges") / POLICY).read_text(encoding="utf-8")
    return text, RuleSet(NAME, airline_rules(text), f"monitor.judges:{POLICY}")


def domain() -> Domain:
    """The airline domain: the tau2-bench airline policy as its reference and its default
    rules."""
    text, rules = _rules()
    return Domain(NAME, (text,), rules.judges(), (f"monitor.judges:{POLICY}",))


def opt_in() -> Domain:
    """The airline domain's opt-in rules alone (no reference text: merge it with
    :func:`domain`)."""
    _, rules = _rules()
    return Domain(NAME, (), rules.judges(opt_in=True), (f"monitor.judges:{POLICY}",))
