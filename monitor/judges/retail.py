"""The ``retail`` domain shipped with the monitor (entry point ``monitor.domains: retail``).

Its reference is the tau2-bench retail agent policy (``domain_data/retail/policy.md``; source
and MIT licence in ``domain_data/retail/SOURCE.md``); its checks are the retail policy rules
(:mod:`monitor.judges.policy.retail`), one judge per default rule. Reads the packaged file when
called, not at import.

:func:`opt_in` is the same domain with only the opt-in rules (``Rule.default`` false: the
process rules whose flags do not predict a failed tau2 run; their measured precision is in
docs/benchmarks.md). A deployment that wants them declares one more entry point in its own
package, e.g. ``[project.entry-points."monitor.domains"] retail-process =
"monitor.judges.retail:opt_in"``; domains of the same name merge, so its judges run next to
the default ones.
"""

from __future__ import annotations

from importlib.resources import files

from monitor.judges.domains import Domain
from monitor.judges.policy.evaluate import RuleSet
from monitor.judges.policy.retail import retail_rules

NAME = "retail"
POLICY = "domain_data/retail/policy.md"


def _rules() -> tuple[str, RuleSet]:
    text = (files("monitor.judges") / POLICY).read_text(encoding="utf-8")
    return text, RuleSet(NAME, retail_rules(text), f"monitor.judges:{POLICY}")


def domain() -> Domain:
    """The retail domain: the tau2-bench retail policy as its reference and its default rules."""
    text, rules = _rules()
    return Domain(NAME, (text,), rules.judges(), (f"monitor.judges:{POLICY}",))


def opt_in() -> Domain:
    """The retail domain's opt-in rules alone (no reference text: merge it with :func:`domain`)."""
    _, rules = _rules()
    return Domain(NAME, (), rules.judges(opt_in=True), (f"monitor.judges:{POLICY}",))
