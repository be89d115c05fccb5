"""Input files for ``monitor replay``: format detection, item iteration, per-type totals.

Two formats are read:

- ``jsonl``: agent-event/v1 JSON Lines, one event per line (docs/design.md). Each non-blank
  line yields either a validated :class:`AgentEvent` or a :class:`LineError` naming
  ``path:line`` (1-based physical line numbers) and the ``InvalidEvent`` reason, field and
  detail. Blank (whitespace-only) lines are skipped.
- ``tau2``: a tau2-bench results JSON file, mapped by :mod:`monitor.replay.tau2`.

Detection (:func:`open_source`): a ``.jsonl`` / ``.ndjson`` suffix means JSON Lines. Otherwise
the first non-blank line is parsed: a tau2 results object -> ``tau2`` (a one-line file), any
other JSON object -> ``jsonl``. If it does not parse alone, the whole file is parsed: tau2
results -> ``tau2``; other valid JSON -> :class:`ReplayError`; invalid JSON whose first
non-blank character is ``{`` -> ``jsonl`` (its bad lines become line errors); anything else ->
:class:`ReplayError`. Empty files are ``jsonl`` with no items.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from monitor.contract.events import EVENT_TYPES, AgentEvent, decode_event
from monitor.core.errors import InvalidEvent, ReplayError
from monitor.replay.tau2 import is_tau2_results, tau2_events

Format = Literal["tau2", "jsonl"]
_JSONL_SUFFIXES = (".jsonl", ".ndjson")


@dataclass(frozen=True)
class LineError:
    """A JSON Lines line that is not a valid agent-event/v1 event."""

    path: str
    line: int
    reason: str
    field: str | None
    detail: str

    @property
    def location(self) -> str:
        """``path:line`` as editors and terminals understand it."""
        return f"{self.path}:{self.line}"

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}: {self.detail}"


ReplayItem = AgentEvent | LineError


@dataclass
class ReplayCounts:
    """Running totals: valid events per type and bad lines."""

    by_type: Counter[str] = field(default_factory=Counter)
    errors: int = 0

    def add(self, item: ReplayItem) -> None:
        """Count one item (an event under its type, a line error under ``errors``)."""
        if isinstance(item, LineError):
            self.errors += 1
        else:
            self.by_type[item.type] += 1

    @property
    def events(self) -> int:
        """Number of valid events counted."""
        return sum(self.by_type.values())

    def as_dict(self) -> dict[str, int]:
        """Every event type (zero included, contract order) plus ``errors``."""
        out = {t: self.by_type.get(t, 0) for t in EVENT_TYPES}
        out["errors"] = self.errors
        return out


def _detect(path: Path) -> tuple[Format, object]:
    """The format, plus the parsed tau2 results object when the whole file was parsed."""
    if path.suffix.lower() in _JSONL_SUFFIXES:
        _check_readable(path)
        return "jsonl", None
    first = _first_line(path)
    if first is None:
        return "jsonl", None
    try:
        obj = json.loads(first)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        return ("tau2", obj) if is_tau2_results(obj) else ("jsonl", None)
    try:
        whole = json.loads(_read_text(path))
    except ValueError:
        if first.lstrip().startswith("{"):
            return "jsonl", None
        raise ReplayError(
            f"{path}: unknown format: neither agent-event/v1 JSON Lines nor tau2 results JSON"
        ) from None
    if is_tau2_results(whole):
        return "tau2", whole
    raise ReplayError(
        f"{path}: JSON {type(whole).__name__} is neither tau2 results "
        "({timestamp, info, tasks, simulations}) nor agent-event/v1 JSON Lines"
    )


@dataclass
class ReplaySource:
    """An opened input: its format and, for progress bars, how many items it will yield."""

    path: Path
    format: Format
    total: int
    _tau2: list[AgentEvent] | None = None

    def __iter__(self) -> Iterator[ReplayItem]:
        if self._tau2 is not None:
            return iter(self._tau2)
        return iter_jsonl(self.path)


def open_source(path: Path) -> ReplaySource:
    """Detect the format and prepare iteration (tau2 files are mapped eagerly, JSONL lazily).

    Raises:
        ReplayError: the file is missing, unreadable, not UTF-8 or of an unknown format (module
            docstring); for tau2, a malformed results file.
    """
    fmt, parsed = _detect(path)
    if fmt == "tau2":
        try:
            events = tau2_events(parsed)
        except ReplayError as exc:
            raise ReplayError(f"{path}: {exc}") from exc
        return ReplaySource(path, fmt, len(events), events)
    return ReplaySource(path, fmt, _count_nonblank_lines(path))


def iter_jsonl(path: Path) -> Iterator[ReplayItem]:
    """Yield an event or a :class:`LineError` per non-blank line of a JSON Lines file.

    Lines are decoded with :func:`decode_event` (bytes, so invalid UTF-8 is a ``not_json``
    line error, and the 256 KiB limit applies per line). Blank lines are skipped but counted
    in line numbers.

    Raises:
        ReplayError: the file cannot be opened or read.
    """
    try:
        with path.open("rb") as fh:
            for number, raw in enumerate(fh, start=1):
                if number == 1:
                    raw = raw.removeprefix(b"\xef\xbb\xbf")  # UTF-8 byte order mark
                if not raw.strip():
                    continue
                try:
                    yield decode_event(raw.rstrip(b"\r\n"))
                except InvalidEvent as exc:
                    yield LineError(str(path), number, exc.reason, exc.field, exc.detail)
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc}") from exc


def _check_readable(path: Path) -> None:
    if path.is_dir():
        raise ReplayError(f"{path}: is a directory; give a JSON Lines or tau2 results file")
    if not path.is_file():
        raise ReplayError(f"{path}: no such file")
    try:
        with path.open("rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc}") from exc


def _first_line(path: Path) -> str | None:
    """The first non-blank line (decoded), or ``None`` for an empty/blank file."""
    _check_readable(path)
    try:
        with path.open("rb") as fh:
            for raw in fh:
                if raw.strip():
                    return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ReplayError(f"{path}: not UTF-8 text: {exc}") from exc
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc}") from exc
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ReplayError(f"{path}: not UTF-8 text: {exc}") from exc
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc}") from exc


def _count_nonblank_lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for raw in fh if raw.strip())
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc}") from exc
