"""Figures (amounts, dates, identifiers) in text, normalised, and an index of supported ones.

Pure: ``re``, ``json`` and ``decimal`` only; :func:`check_figures` walks a conversation.

- Amounts carry a currency mark: ``$12.50``, ``€1,234``, ``12.50 USD``, ``30 dollars``. The key
  is the normalised decimal (``"$1,234.50"`` -> ``"1234.5"``). In sources every number counts
  (tool output is JSON: ``"price": 174`` supports ``$174``).
- Dates: ISO ``2024-05-01``, ``May 1``/``May 1st, 2024``/``1 May 2024`` and US ``05/01/2024``;
  the key is ``(year or None, month, day)``. A date without a year matches any year.
- Identifiers: tokens of 5+ letters/digits/underscores mixing letters and digits (``HAT271``,
  ``EHGLP3``, ``#W1234567``, ``certificate_8045380``) or runs of 6+ digits; ordinals, decades
  and numbers with a unit (``1950s``, ``100km``, ``1080p``) and amounts/dates are not
  identifiers, nor is an identifier given as an example of a format ("your user ID, like
  'sara_doe_496'", "e.g. ZFA04Y": :data:`_EXAMPLE_RE` right before it). Matching is
  case-insensitive on whole tokens (a source
  token ``certificate_8045380`` also supplies its parts ``certificate`` and ``8045380``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Literal

from monitor.contract.events import AgentEvent
from monitor.judges.lexicon import pattern_key

FigureKind = Literal["amount", "date", "identifier"]

_MONTHS = {
    m: i + 1
    for i, names in enumerate(
        (
            "jan january",
            "feb february",
            "mar march",
            "apr april",
            "may",
            "jun june",
            "jul july",
            "aug august",
            "sep sept september",
            "oct october",
            "nov november",
            "dec december",
        )
    )
    for m in names.split()
}
_MONTH_ALT = "|".join(sorted(_MONTHS, key=len, reverse=True))
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_AMOUNT_RE = re.compile(
    rf"(?:[$€£]\s?(?P<a>{_NUM}))"
    rf"|(?:\b(?P<b>{_NUM})\s?(?:USD|EUR|GBP|dollars?|euros?|pounds?)\b)",
    re.IGNORECASE,
)
#: ``_AMOUNT_RE``'s first alternative alone: its matches where the second cannot match
_MARKED_AMOUNT_RE = re.compile(rf"[$€£]\s?(?P<a>{_NUM})", re.IGNORECASE)
_ISO_DATE_RE = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
#: what every ISO date holds, found fast (no look-behind: the scan skips to digits)
_ISO_HINT_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_US_DATE_RE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")
_MDY_RE = re.compile(
    rf"\b({_MONTH_ALT})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}})\b)?", re.IGNORECASE
)
_DMY_RE = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_ALT})\b\.?(?:,?\s+(\d{{4}})\b)?",
    re.IGNORECASE,
)
_ID_RE = re.compile(
    r"#?\b(?:(?=[A-Za-z0-9_]*\d)(?=[A-Za-z0-9_]*[A-Za-z])[A-Za-z0-9_]{5,}|\d{6,})\b"
)
#: the words that introduce an example of a format right before an identifier (its quote optional)
_EXAMPLE_RE = re.compile(
    r"\b(?:like|e\.g\.,?|for example,?|for instance,?|such as|as in)\s*['\"`\u2018\u201c]?$",
    re.IGNORECASE,
)
_ORDINAL_RE = re.compile(r"^\d+(?:st|nd|rd|th)$", re.IGNORECASE)
#: A number with a unit or a decade ("1950s", "100km", "1080p", "4k") is a quantity, not an id.
_QUANTITY_RE = re.compile(
    r"^\d+(?:s|km|kg|mg|ml|cm|mm|gb|mb|kb|tb|hz|khz|mhz|ghz|px|am|pm|p|k|hrs?|mph|kph|ft|lbs?)$",
    re.IGNORECASE,
)
_TOKEN_RE = re.compile(r"[A-Za-z0-9_]+")
_NUMBER_RE = re.compile(_NUM)
#: ``json.dumps(arguments, ensure_ascii=False, default=str)``, the encoder built once
_ARGUMENTS_JSON = json.JSONEncoder(ensure_ascii=False, default=str)
_DIGIT_RE = re.compile(r"\d")  # every figure holds one (the same ``\d`` as the patterns)
#: the first three letters of every month name (each name in ``_MONTHS`` starts with one)
_MONTH_STEMS = tuple(sorted({m[:3] for m in _MONTHS}))
#: a lower-case word in every currency name of ``_AMOUNT_RE`` (with the marks, its anchors)
_CURRENCY_WORDS = ("usd", "eur", "gbp", "dollar", "pound")


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure as written (``text``) and its normalised ``key`` (compared with sources)."""

    kind: FigureKind
    text: str
    key: str


def normalise_amount(text: str) -> str | None:
    """``"1,234.50"`` -> ``"1234.5"``; ``None`` when ``text`` is not a number."""
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    if value == value.to_integral_value():
        return str(value.quantize(Decimal(1)))
    return format(value.normalize(), "f")


def _date_key(year: str | None, month: int, day: int) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    return f"{year or '*'}-{month:02d}-{day:02d}"


def _may_name_month(text: str, lower: str | None) -> bool:
    """False only when ``text`` cannot hold a month name (``lower``: ``text.lower()`` when
    ``text`` is ASCII, where the patterns' case-insensitive letters are ASCII letters; None:
    no such shortcut, True)."""
    return lower is None or any(stem in lower for stem in _MONTH_STEMS)


def _ascii_lower(text: str) -> str | None:
    return text.lower() if text.isascii() else None


def _dates(text: str, lower: str | None = None) -> list[tuple[tuple[int, int], str, str]]:
    """``((start, end), text, key)`` of every date in ``text`` (``lower``: see
    :func:`_may_name_month`). Each pattern runs only where its literal parts occur (a digit,
    ``-``, ``/``, a month name): the same dates as running all four."""
    found: list[tuple[re.Match[str], str | None, int, int]] = []
    if not _DIGIT_RE.search(text):  # each pattern holds a digit
        return []
    if "-" in text and _ISO_HINT_RE.search(text):
        for m in _ISO_DATE_RE.finditer(text):
            found.append((m, m.group(1), int(m.group(2)), int(m.group(3))))
    if "/" in text:
        for m in _US_DATE_RE.finditer(text):
            found.append((m, m.group(3), int(m.group(1)), int(m.group(2))))
    if _may_name_month(text, lower if lower is not None else _ascii_lower(text)):
        for m in _MDY_RE.finditer(text):
            found.append((m, m.group(3), _MONTHS[pattern_key(m.group(1))], int(m.group(2))))
        for m in _DMY_RE.finditer(text):
            found.append((m, m.group(3), _MONTHS[pattern_key(m.group(2))], int(m.group(1))))
    out = []
    for m, year, month, day in found:
        key = _date_key(year, month, day)
        if key is not None:
            out.append((m.span(), m.group(0), key))
    return out


def extract_figures(text: str | None) -> list[Figure]:
    """Amounts, dates and identifiers in ``text``, in that order, without duplicates."""
    if not text or not _DIGIT_RE.search(text):  # every figure holds a digit
        return []
    figures: list[Figure] = []
    taken: list[tuple[int, int]] = []
    lower = _ascii_lower(text)
    if _may_hold_amount(text, lower):
        for m in _amount_pattern(lower).finditer(text):
            key = normalise_amount(m.group("a") or m.group("b"))  # "a" is never empty
            if key is not None:
                figures.append(Figure("amount", m.group(0).strip(), key))
                taken.append(m.span())
    for span, raw, key in _dates(text, lower):
        figures.append(Figure("date", raw, key))
        taken.append(span)
    for m in _ID_RE.finditer(text):
        raw = m.group(0)
        inside = any(s <= m.start() and m.end() <= e for s, e in taken)
        if (
            not inside
            and not _ORDINAL_RE.match(raw)
            and not _QUANTITY_RE.match(raw)
            and not _EXAMPLE_RE.search(text, max(0, m.start() - 24), m.start())
        ):
            figures.append(Figure("identifier", raw, raw.lstrip("#").lower()))
    unique: dict[tuple[str, str], Figure] = {}
    for f in figures:
        unique.setdefault((f.kind, f.key), f)
    return list(unique.values())


def _amount_pattern(lower: str | None) -> re.Pattern[str]:
    """``_AMOUNT_RE``, or its first alternative alone where the second (a number and a
    currency word) cannot match (ASCII text without a currency word): the same matches."""
    if lower is not None and not any(word in lower for word in _CURRENCY_WORDS):
        return _MARKED_AMOUNT_RE
    return _AMOUNT_RE


def _may_hold_amount(text: str, lower: str | None) -> bool:
    """False only when ``_AMOUNT_RE`` cannot match ``text``: no currency mark and (ASCII text,
    ``lower`` given) no currency word."""
    if lower is None or "$" in text:  # a non-ASCII text may hold "\u20ac" or "\u00a3"
        return True
    return any(word in lower for word in _CURRENCY_WORDS)


#: texts up to this size have their terms memoized (:func:`_terms`); longer ones are re-read
MEMO_MAX_CHARS = 8192


@lru_cache(maxsize=4096)
def _terms(text: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The normalised numbers, date keys and tokens (with their ``_`` parts) of ``text``, in
    order: what :meth:`SourceIndex.add` records. A pure function of the text, memoized: a
    conversation's tool results and user messages come back with every gate request."""
    amounts = (normalise_amount(m.group(0)) for m in _NUMBER_RE.finditer(text))
    numbers = tuple(key for key in amounts if key is not None)
    dates = tuple(key for _, _, key in _dates(text))
    tokens: list[str] = []
    for tok in _TOKEN_RE.findall(text):
        low = tok.lower()
        tokens.append(low)
        if "_" in low:
            tokens.extend(low.split("_"))
    return numbers, dates, tuple(tokens)


class SourceIndex:
    """What earlier text supports: numbers, dates and tokens, each with its first source.

    ``base`` (optional, never changed here) is an index of texts that came before everything
    added to this one (the reference texts, indexed once): a key it holds keeps its source."""

    def __init__(self, base: SourceIndex | None = None) -> None:
        self._base = base
        self._numbers: dict[str, str] = {}
        self._dates: dict[str, str] = {}
        self._month_days: dict[str, str] = {}  # "MM-DD" of every date -> its first source
        self._tokens: dict[str, str] = {}

    def add(self, text: str | None, source: str = "") -> None:
        """Index ``text`` (a tool result, call arguments, a user message...) from ``source``."""
        if not text:
            return
        found = _terms(text) if len(text) <= MEMO_MAX_CHARS else None
        found = found or _terms.__wrapped__(text)
        base = self._base  # it came first: a key it holds keeps its source
        _record(found[0], base._numbers if base else None, self._numbers, source)
        _record(found[1], base._dates if base else None, self._dates, source)
        month_days = [key.split("-", 1)[1] for key in found[1]]
        _record(month_days, base._month_days if base else None, self._month_days, source)
        _record(found[2], base._tokens if base else None, self._tokens, source)

    def _get(self, kind: str, key: str) -> str | None:
        if self._base is not None:
            found = self._base._get(kind, key)
            if found is not None:
                return found
        own: dict[str, str] = getattr(self, kind)
        return own.get(key)

    def source_of(self, figure: Figure) -> str | None:
        """The first source whose text holds ``figure`` (by normalised key), else ``None``."""
        if figure.kind == "amount":
            return self._get("_numbers", figure.key)
        if figure.kind == "identifier":
            return self._get("_tokens", figure.key)
        year, month_day = figure.key.split("-", 1)
        if year == "*":  # any year: the first source of that month and day
            return self._get("_month_days", month_day)
        found = self._get("_dates", figure.key)
        return found if found is not None else self._get("_dates", f"*-{month_day}")

    def supports(self, figure: Figure) -> bool:
        """True when ``figure`` occurs in the indexed sources."""
        return self.source_of(figure) is not None


def _record(
    keys: Sequence[str], base: dict[str, str] | None, own: dict[str, str], source: str
) -> None:
    """``own.setdefault(key, source)`` for each of ``keys`` that ``base`` does not hold."""
    if base is None:
        for key in keys:
            own.setdefault(key, source)
    else:
        for key in keys:
            if key not in base:
                own.setdefault(key, source)


def derivation(figure: Figure, stated: Sequence[Figure]) -> str | None:
    """How amount ``figure`` follows from supported amounts ``stated`` in the same message.

    ``"2 x 174"`` when it is 2-9 times one of them, ``"402 + 306"`` when it is the sum of two
    or more of them (at most 10 considered); ``None`` otherwise. This accepts a message that
    shows its arithmetic ("$174 per person, so $348 for both") while an amount computed from
    figures the message does not state stays unsupported.
    """
    if figure.kind != "amount":
        return None
    target = Decimal(figure.key)
    values = sorted({Decimal(f.key) for f in stated if f.kind == "amount"})[:10]
    for v in values:
        for k in range(2, 10):
            if v * k == target:
                return f"{k} x {v}"
    for mask in range(1, 1 << len(values)):
        parts = [v for i, v in enumerate(values) if mask >> i & 1]
        if len(parts) >= 2 and sum(parts) == target:
            return " + ".join(str(p) for p in parts)
    return None


def reference_index(reference: Sequence[str]) -> SourceIndex:
    """The index of ``reference`` texts (source ``"reference:<i>"``), what every conversation's
    index starts from."""
    index = SourceIndex()
    for i, text in enumerate(reference):
        index.add(text, f"reference:{i}")
    return index


def check_figures(
    events: Sequence[AgentEvent],
    reference: Sequence[str] | SourceIndex = (),
    only: str | None = None,
) -> Iterator[tuple[AgentEvent, list[Figure], dict[str, str | None]]]:
    """``(message, figures, sources)`` for each assistant message that has figures.

    ``sources`` maps each figure's text to the event id that supports it (``"reference:<i>"``
    for a reference text, ``None`` when unsupported). Sources, in conversation order:
    ``reference`` texts (first), tool results (content and error), tool-call arguments (for
    later messages only) and user/system messages; the assistant's own text is not a source.
    ``reference`` may be given pre-indexed (:func:`reference_index`; it is read, never
    changed). ``only``: yield for the message with that event id alone (the sources are
    indexed as before, other messages' figures are not extracted): the same tuple as without.
    """
    asked: dict[str | None, list[Figure]] = {}  # ``only``'s text -> its figures, extracted once
    if only is not None:
        for e in events:
            if e.event_id == only and e.message is not None and e.message.role == "assistant":
                asked[e.message.content] = extract_figures(e.message.content)
        if not any(asked.values()):
            return  # no figure to judge: nothing to index either
    sources = FigureSources(reference)
    for e in events:
        msg = e.message
        if (
            msg is not None
            and msg.role == "assistant"
            and (only is None or e.event_id == only)
            and (
                figures := list(asked[msg.content])
                if msg.content in asked
                else extract_figures(msg.content)
            )
        ):
            yield e, figures, sources.of(figures)
        sources.add(e)


class FigureSources:
    """The sources of :func:`check_figures` over a conversation's events so far: ``reference``
    texts (or their :func:`reference_index`, read, never changed), then each event given to
    :meth:`add` in conversation order."""

    def __init__(self, reference: Sequence[str] | SourceIndex = ()) -> None:
        base = reference if isinstance(reference, SourceIndex) else reference_index(reference)
        self.index = SourceIndex(base)

    def of(self, figures: Sequence[Figure]) -> dict[str, str | None]:
        """Each figure's text -> the event id (or ``reference:<i>``) that supports it, or
        None: from the sources added so far."""
        return {f.text: self.index.source_of(f) for f in figures}

    def add(self, e: AgentEvent) -> None:
        """Index what ``e`` supports for later messages: a tool result's content and error,
        a user or system message's text, the arguments of the tool calls it makes."""
        if e.tool_result is not None:
            self.index.add(e.tool_result.content, e.event_id)
            self.index.add(e.tool_result.error, e.event_id)
        msg = e.message
        if msg is None:
            return
        if msg.role in ("user", "system"):
            self.index.add(msg.content, e.event_id)
        for call in msg.tool_calls:
            self.index.add(_ARGUMENTS_JSON.encode(call.arguments), e.event_id)
