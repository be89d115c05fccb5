"""Domain plugins: reference texts and checks per conversation domain (reads files).

A :class:`Domain` (the ``context.domain`` of a conversation, e.g. ``airline``) brings

- ``references``: texts that count as sources for the figure judge (a policy, a price list, a
  knowledge base): a figure or claim they support is not "unsupported";
- ``judges``: its own deterministic checks (the :class:`~monitor.judges.base.Judge` protocol),
  run on that domain's conversations next to the built-in ones.

Domains come from two places, merged by name (references concatenated, judges appended):

1. Python entry points in the group ``monitor.domains`` (declared in a package's
   ``pyproject.toml``: ``[project.entry-points."monitor.domains"] airline =
   "monitor.judges.airline:domain"``); the object is a :class:`Domain` or a callable without
   arguments returning one. This package ships ``airline`` (the tau2-bench airline policy).
2. A directory (setting ``domains_dir``, ``MONITOR_DOMAINS_DIR``): one sub-directory per domain
   whose ``*.md`` and ``*.txt`` files (sorted by name, UTF-8) are its references.

An entry point that fails to load is skipped with a warning (a broken plugin never stops the
judges); a missing directory raises :class:`~monitor.core.errors.ConfigError`. Nothing is read at
import time.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

from monitor.core.errors import ConfigError
from monitor.judges.base import Judge

log = logging.getLogger("monitor.judges.domains")
ENTRY_POINT_GROUP = "monitor.domains"
REFERENCE_SUFFIXES = (".md", ".txt")


@dataclass(frozen=True)
class Domain:
    """One domain's reference texts and extra checks; ``sources`` says where they came from."""

    name: str
    references: tuple[str, ...] = ()
    judges: tuple[Judge, ...] = ()
    sources: tuple[str, ...] = field(default=())

    def merged(self, other: Domain) -> Domain:
        """This domain with ``other``'s references and judges added after its own."""
        return Domain(
            self.name,
            self.references + other.references,
            self.judges + other.judges,
            self.sources + other.sources,
        )

    def fingerprint(self) -> str:
        """A short hash of the reference texts (shown with the judge report)."""
        h = hashlib.sha256("\0".join(self.references).encode())
        return h.hexdigest()[:12]


def _from_entry_point(name: str, obj: object) -> Domain | None:
    value = obj() if callable(obj) and not isinstance(obj, Domain) else obj
    if not isinstance(value, Domain):
        log.warning("entry point %s in %s is not a Domain; skipped", name, ENTRY_POINT_GROUP)
        return None
    return value


def entry_point_domains() -> dict[str, Domain]:
    """The domains registered through the ``monitor.domains`` entry points."""
    out: dict[str, Domain] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            domain = _from_entry_point(ep.name, ep.load())
        except Exception as exc:  # a broken plugin must not stop the judges
            log.warning("domain plugin %s failed to load: %s", ep.name, exc)
            continue
        if domain is not None:
            out[domain.name] = out[domain.name].merged(domain) if domain.name in out else domain
    return out


def directory_domains(directory: Path) -> dict[str, Domain]:
    """Domains from ``directory``: sub-directory name = domain, its .md/.txt files = its
    references. Raises ConfigError when ``directory`` is not a directory."""
    if not directory.is_dir():
        raise ConfigError(f"domains_dir {directory} is not a directory")
    out: dict[str, Domain] = {}
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        files = sorted(f for f in sub.iterdir() if f.suffix.lower() in REFERENCE_SUFFIXES)
        if files:
            texts = tuple(f.read_text(encoding="utf-8") for f in files)
            out[sub.name] = Domain(sub.name, texts, (), tuple(str(f) for f in files))
    return out


def load_domains(
    directory: Path | None = None,
    plugins: Callable[[], Mapping[str, Domain]] = entry_point_domains,
) -> dict[str, Domain]:
    """Every domain: the entry points' (``plugins``), then ``directory``'s merged in."""
    out = dict(plugins())
    for name, d in (directory_domains(directory) if directory is not None else {}).items():
        out[name] = out[name].merged(d) if name in out else d
    return out
