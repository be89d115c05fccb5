"""Grafana's query interpolation for the Postgres datasource, in plain Python (pure, no I/O).

It turns a panel's ``rawSql`` into the SQL that Grafana 11.2 (the version docker-compose.yml
runs) would send to Postgres, in Grafana's two stages:

1. Frontend (``templateSrv.replace`` with the SQL datasource's ``interpolateVariable``):
   - dashboard variables (types query, custom, constant, textbox) as ``$var``, ``${var}``,
     ``[[var]]`` and ``${var:FORMAT}`` / ``[[var:FORMAT]]`` with FORMAT one of ``csv``,
     ``sqlstring``, ``singlequote``, ``doublequote``, ``raw``, ``pipe``, ``json``, ``text``.
     Without a format a multi-value or include-All variable is single-quoted (``'a','b'``,
     quotes doubled), a single-value one only has its quotes doubled; All sends the
     variable's ``allValue`` verbatim, or every option.
   - built-ins ``$__interval``, ``$__interval_ms``, ``$__from``, ``$__to``, ``$__range``,
     ``$__range_s``, ``$__range_ms`` and, in variable queries, ``$__searchFilter`` (``%``).
2. Backend (``sqleng.Interpolate`` + the postgres macro engine, TimescaleDB off):
   ``$__time(col)``, ``$__timeEpoch(col)``, ``$__timeFilter(col)``, ``$__timeFrom()``,
   ``$__timeTo()``, ``$__timeGroup(col, interval[, fill])``, ``$__timeGroupAlias(...)``,
   ``$__unixEpochFrom()``, ``$__unixEpochTo()``, ``$__unixEpochFilter(col)``,
   ``$__unixEpochNanoFilter(col)``, ``$__unixEpochNanoFrom()``, ``$__unixEpochNanoTo()``,
   ``$__unixEpochGroup(col, interval[, fill])``, ``$__unixEpochGroupAlias(...)``.
   Expansions are Grafana's text exactly (e.g. ``floor(extract(epoch from col)/300)*300``),
   arguments are split on every comma and a macro's argument list ends at its first ``)``,
   as in Grafana. SQL comments are not stripped (Grafana 11.2 expands macros in them too).

Anything else that is still shaped like a macro or variable afterwards (an unknown ``$__x``,
``$undefined``, ``${var.path}``, an unsupported format) raises :class:`UnknownMacroError` or
:class:`UnknownVariableError`, so a panel using something this module does not model cannot
pass untested. ``$1``-style positional parameters are left for Postgres to reject.

The interval a panel gets (``$__interval``) follows Grafana's frontend: the time range divided
by the panel's data points (``maxDataPoints``, else its width in pixels on a 1920 px screen),
rounded by ``rangeutil.roundInterval``, floored at the panel's ``interval`` (min interval) or
the datasource's ``timeInterval``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

ALL = "$__all"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SCREEN_WIDTH_PX = 1920


class GrafanaSQLError(ValueError):
    """The query uses something Grafana would reject or this module does not model."""


class UnknownMacroError(GrafanaSQLError):
    pass


class UnknownVariableError(GrafanaSQLError):
    pass


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None or self.start > self.end:
            raise GrafanaSQLError(f"bad time range {self.start} .. {self.end}")


@dataclass(frozen=True)
class Variable:
    """A dashboard variable with its resolved options and its current selection."""

    name: str
    multi: bool = False
    include_all: bool = False
    all_value: str | None = None
    options: tuple[str, ...] = ()
    selected: tuple[str, ...] = (ALL,)

    @property
    def is_all(self) -> bool:
        return self.selected[:1] == (ALL,)


# --- time ranges and intervals ------------------------------------------------------------------

_UNIT_S = {
    "ms": 0.001,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": 86400,
    "w": 604800,
    "M": 2592000,
    "y": 31536000,
}


def parse_time(expr: str, now: datetime) -> datetime:
    """A dashboard time: ``now``, ``now-6h`` / ``now+1d`` (units s m h d w), ISO 8601, epoch ms."""
    text = expr.strip()
    if m := re.fullmatch(r"now(?:([+-])(\d+)([smhdw]))?", text):
        if not m.group(1):
            return now
        delta = timedelta(seconds=int(m.group(2)) * _UNIT_S[m.group(3)])
        return now + delta if m.group(1) == "+" else now - delta
    if text.isdigit():
        return datetime.fromtimestamp(int(text) / 1000, UTC)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise GrafanaSQLError(f"unsupported dashboard time {expr!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def interval_to_ms(text: str) -> float:
    """Grafana frontend ``rangeutil.intervalToMs`` (``>`` prefix of a min interval dropped)."""
    text = text.strip().lstrip(">")
    if re.fullmatch(r"\d+", text):
        return int(text) * 1000.0
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|[smhdwMy])", text)
    if not m:
        raise GrafanaSQLError(f"invalid interval {text!r}")
    return int(float(m.group(1))) * _UNIT_S[m.group(2)] * 1000


def round_interval(ms: float) -> int:
    """Grafana frontend ``rangeutil.roundInterval``: the nice interval for ``ms``."""
    ladder = [
        (10, 1),
        (15, 10),
        (35, 20),
        (75, 50),
        (150, 100),
        (350, 200),
        (750, 500),
        (1500, 1000),
        (3500, 2000),
        (7500, 5000),
        (12500, 10000),
        (17500, 15000),
        (25000, 20000),
        (45000, 30000),
        (90000, 60000),
        (210000, 120000),
        (450000, 300000),
        (750000, 600000),
        (1050000, 900000),
        (1500000, 1200000),
        (2700000, 1800000),
        (5400000, 3600000),
        (9000000, 7200000),
        (16200000, 10800000),
        (32400000, 21600000),
        (86400000, 43200000),
        (604800000, 86400000),
        (1814400000, 604800000),
        (3628800000, 2592000000),
    ]
    return next((nice for limit, nice in ladder if ms < limit), 31536000000)


def panel_interval_ms(panel: Mapping, time_range: TimeRange, min_interval: str | None) -> int:
    """The ``intervalMs`` Grafana sends for ``panel`` (see the module docstring)."""
    points = panel.get("maxDataPoints") or max(
        1, round(panel.get("gridPos", {}).get("w", 24) / 24 * SCREEN_WIDTH_PX)
    )
    range_ms = (time_range.end - time_range.start).total_seconds() * 1000
    interval = round_interval(range_ms / points)
    low = panel.get("interval") or min_interval
    return int(max(interval, interval_to_ms(low))) if low else interval


def seconds_to_hms(seconds: float) -> str:
    """Grafana frontend ``rangeutil.secondsToHms`` (the text of ``$__interval``)."""
    parts = (
        (math.floor(seconds / 31536000), "y"),
        (math.floor((seconds % 31536000) / 86400), "d"),
        (math.floor((seconds % 86400) / 3600), "h"),
        (math.floor((seconds % 3600) / 60), "m"),
        (math.floor(seconds % 60), "s"),
        (math.floor(seconds * 1000), "ms"),
    )
    return next((f"{n}{unit}" for n, unit in parts if n), "less than a millisecond")


def parse_go_interval(text: str, now: datetime) -> timedelta:
    """grafana-plugin-sdk-go ``gtime.ParseInterval``: ``Nd Nw NM Ny`` or a Go duration."""
    if m := re.fullmatch(r"(\d+)([dwMy])", text):
        n, unit = int(m.group(1)), m.group(2)
        if unit in "dw":
            return timedelta(days=n * (7 if unit == "w" else 1))
        months = n * (12 if unit == "y" else 1)  # Go's AddDate: overflowing days roll over
        y, mo = divmod(now.month - 1 + months, 12)
        first = now.replace(year=now.year + y, month=mo + 1, day=1)
        return first + timedelta(days=now.day - 1) - now
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    m = re.fullmatch(r"([-+]?)((?:(?:\d+\.?\d*|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+|0)", text)
    if not m:
        raise GrafanaSQLError(f"error parsing interval {text}")
    parts = re.findall(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)", m.group(2))
    seconds = sum(float(n) * units[u] for n, u in parts)
    return timedelta(seconds=-seconds if m.group(1) == "-" else seconds)


def go_float(x: float) -> str:
    """Go's ``%v`` of a float64: shortest digits, exponent form below 1e-4 or from 1e6."""
    if x == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(float(x))).normalize().as_tuple()
    assert isinstance(exponent, int)
    exp = len(digits) + exponent - 1
    text = "-" if sign else ""
    if exp < -4 or exp >= 6:
        mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if digits[1:] else "")
        return f"{text}{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    return text + repr(abs(float(x))).removesuffix(".0")


def unix(t: datetime) -> int:
    """Go ``t.Unix()``: whole seconds since the epoch, rounded down."""
    delta = t - _EPOCH
    return delta.days * 86400 + delta.seconds


def ns(t: datetime) -> int:
    """Go ``t.UnixNano()``."""
    return unix(t) * 10**9 + (t - _EPOCH).microseconds * 1000


def rfc3339(t: datetime) -> str:
    """Go ``t.UTC().Format(time.RFC3339Nano)`` (microsecond precision here)."""
    t = t.astimezone(UTC)
    frac = f".{t.microsecond:06d}".rstrip("0").rstrip(".")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + frac + "Z"


# --- stage 1: the frontend's template variables ---------------------------------------------

_VARIABLE = re.compile(
    r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}", re.ASCII
)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _format(value: str | list[str], fmt: str | None, var: Variable) -> str:
    values = value if isinstance(value, list) else [value]
    if fmt is None:  # the SQL datasource's interpolateVariable
        if isinstance(value, str) and not (var.multi or var.include_all):
            return value.replace("'", "''")
        return ",".join(_quote(v) for v in values)
    formats = {
        "csv": lambda: ",".join(values),
        "raw": lambda: ",".join(values),
        "pipe": lambda: "|".join(values),
        "sqlstring": lambda: ",".join(_quote(v) for v in values),
        "singlequote": lambda: ",".join("'" + v.replace("'", "\\'") + "'" for v in values),
        "doublequote": lambda: ",".join('"' + v.replace('"', '\\"') + '"' for v in values),
        "json": lambda: json.dumps(value, separators=(",", ":")),
        "text": lambda: "All" if var.is_all else " + ".join(values),
    }
    return formats[fmt]()


_FORMATS = {"csv", "raw", "pipe", "sqlstring", "singlequote", "doublequote", "json", "text"}


def _variable_text(var: Variable, fmt: str | None, variables: Mapping[str, Variable]) -> str:
    if fmt is not None and fmt not in _FORMATS:
        raise UnknownVariableError(f"${{{var.name}:{fmt}}}: format not modelled by grafana_sql")
    if var.is_all:
        if var.all_value is not None and fmt not in ("text", "percentencode", "queryparam"):
            return interpolate_variables(var.all_value, variables, builtins={})
        value: str | list[str] = list(var.options)
    else:
        value = list(var.selected) if var.multi else var.selected[0]
    return _format(value, fmt, var)


def interpolate_variables(
    sql: str, variables: Mapping[str, Variable], builtins: Mapping[str, str]
) -> str:
    """Stage 1: replace dashboard variables and built-ins; unknown names are left as they are."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if m.group(5):
            raise UnknownVariableError(f"{m.group(0)}: field paths are not modelled")
        if name in variables:
            return _variable_text(variables[name], fmt, variables)
        if name in builtins:
            if fmt not in (None, "raw", "text"):
                raise UnknownVariableError(f"{m.group(0)}: format not modelled for built-ins")
            return builtins[name]
        return m.group(0)

    return _VARIABLE.sub(one, sql)


# --- stage 2: the backend's macros ------------------------------------------------------------

_MACRO = re.compile(r"\$([_a-zA-Z0-9]+)\(([^\)]*)\)")


def _check_fill(fill: str) -> None:
    if fill in ("NULL", "previous"):
        return
    if "_" in fill:
        raise GrafanaSQLError(f"error parsing fill value {fill}")
    try:
        float(fill)
    except ValueError:
        raise GrafanaSQLError(f"error parsing fill value {fill}") from None


def _macro(name: str, args: list[str], tr: TimeRange) -> str:
    start, end = tr.start.astimezone(UTC), tr.end.astimezone(UTC)
    need_col = {
        "__time",
        "__timeEpoch",
        "__timeFilter",
        "__unixEpochFilter",
        "__unixEpochNanoFilter",
    }
    if name in need_col and (not args or args == [""]):
        raise GrafanaSQLError(f"missing time column argument for macro {name}")
    if name in ("__timeGroup", "__timeGroupAlias", "__unixEpochGroup", "__unixEpochGroupAlias"):
        if len(args) < 2:
            raise GrafanaSQLError(f"macro {name} needs time column and interval")
        seconds = go_float(parse_go_interval(args[1].strip("'"), end).total_seconds())
        if len(args) == 3:
            _check_fill(args[2])
        alias = ' AS "time"' if name.endswith("Alias") else ""
        if name.startswith("__timeGroup"):
            return f"floor(extract(epoch from {args[0]})/{seconds})*{seconds}{alias}"
        return f"floor(({args[0]})/{seconds})*{seconds}{alias}"
    expansions = {
        "__time": lambda: f'{args[0]} AS "time"',
        "__timeEpoch": lambda: f'extract(epoch from {args[0]}) as "time"',
        "__timeFilter": lambda: f"{args[0]} BETWEEN '{rfc3339(start)}' AND '{rfc3339(end)}'",
        "__timeFrom": lambda: f"'{rfc3339(start)}'",
        "__timeTo": lambda: f"'{rfc3339(end)}'",
        "__unixEpochFilter": lambda: (f"{args[0]} >= {unix(start)} AND {args[0]} <= {unix(end)}"),
        "__unixEpochNanoFilter": lambda: f"{args[0]} >= {ns(start)} AND {args[0]} <= {ns(end)}",
        "__unixEpochNanoFrom": lambda: str(ns(start)),
        "__unixEpochNanoTo": lambda: str(ns(end)),
    }
    if name not in expansions:
        raise UnknownMacroError(f"unknown macro ${name}(...)")
    return expansions[name]()


def expand_macros(sql: str, time_range: TimeRange, interval_ms: int) -> str:
    """Stage 2: ``sqleng.Interpolate`` then the postgres macro engine."""
    start, end = time_range.start, time_range.end
    sql = sql.replace("$__interval_ms", str(interval_ms))
    sql = sql.replace("$__interval", go_format_interval(interval_ms))
    sql = sql.replace("$__unixEpochFrom()", str(unix(start)))
    sql = sql.replace("$__unixEpochTo()", str(unix(end)))
    original = sql

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name == "__timeGroup":  # Grafana's pre-5.3 compatibility: a ',' after it aliases it
            at = original.find(m.group(0)) + len(m.group(0))
            if original[at : at + 1] == ",":
                name = "__timeGroupAlias"
        return _macro(name, [a.strip(" ") for a in m.group(2).split(",")], time_range)

    return _MACRO.sub(one, sql)


def go_format_interval(interval_ms: int) -> str:
    """grafana-plugin-sdk-go ``gtime.FormatInterval`` (truncating)."""
    for size, unit in (
        (31536000000, "y"),
        (86400000, "d"),
        (3600000, "h"),
        (60000, "m"),
        (1000, "s"),
        (1, "ms"),
    ):
        if interval_ms >= size:
            return f"{interval_ms // size}{unit}"
    return "1ms"


# --- both stages ------------------------------------------------------------------------------

_LEFTOVER = re.compile(r"\$\{\w[^}]*\}|\[\[\w+(?::\w+)?\]\]|\$[A-Za-z_]\w*", re.ASCII)


def interpolate(
    sql: str,
    *,
    time_range: TimeRange,
    interval_ms: int,
    variables: Sequence[Variable] = (),
    search_filter: bool = False,
) -> str:
    """``sql`` as Grafana sends it to Postgres (see the module docstring)."""
    range_ms = int((time_range.end - time_range.start).total_seconds() * 1000)
    builtins = {
        "__interval": seconds_to_hms(interval_ms / 1000),
        "__interval_ms": str(interval_ms),
        "__from": str(ns(time_range.start) // 10**6),
        "__to": str(ns(time_range.end) // 10**6),
        "__range": seconds_to_hms(range_ms / 1000),
        "__range_s": str(range_ms // 1000),
        "__range_ms": str(range_ms),
    }
    if search_filter:
        builtins["__searchFilter"] = "%"
    by_name = {v.name: v for v in variables}
    out = expand_macros(interpolate_variables(sql, by_name, builtins), time_range, interval_ms)
    for m in _LEFTOVER.finditer(out):
        text = m.group(0)
        if text.startswith("$__"):
            raise UnknownMacroError(f"{text}: not a macro grafana_sql supports")
        raise UnknownVariableError(f"{text}: no such dashboard variable")
    return out
