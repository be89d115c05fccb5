"""What the analytics commands share: the scope options, the time range, the database, JSON.

Exit codes of every analytics command: 0 done, 2 bad options or no database configured or
reachable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import math
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from sqlalchemy.ext.asyncio import AsyncEngine as AsyncEngine

from monitor.alerts.durations import parse_duration
from monitor.analytics.repo import Segment
from monitor.config import load_settings
from monitor.stack import endpoints
from monitor.store.engine import make_engine
from monitor.store.replica import read_source

T = TypeVar("T")

AGENT = typer.Option(None, "--agent", "-a", help="Agent id (wildcards * and ? allowed).")
DOMAIN = typer.Option(None, "--domain", help="Domain (context.domain).")
TIER = typer.Option(None, "--tier", min=0, max=3, help="Tier 1-3 (0 = not given).")
VERSION = typer.Option(None, "--agent-version", help="Agent version.")
SINCE = typer.Option("24h", "--since", help="Range: the last DURATION (30m, 24h, 7d ...).")
FROM = typer.Option(None, "--from", help="Range start, ISO 8601 (overrides --since).")
TO = typer.Option(None, "--to", help="Range end, ISO 8601 (default: now).")
JSON = typer.Option(False, "--json", help="Print JSON for scripts instead of tables.")


def unit_option(default: float | None, flag: str, help: str) -> Any:
    """An option whose value is a share, rate or confidence: in [0, 1]."""
    return typer.Option(default, flag, min=0.0, max=1.0, help=help)


@dataclass(frozen=True)
class Query:
    """The scope and half-open time range ``[start, end)`` a command reports on."""

    segment: Segment
    start: datetime
    end: datetime

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in vars(self.segment).items() if v is not None]
        scope = ", ".join(parts) if parts else "all agents"
        return f"{scope}; {self.start:%Y-%m-%d %H:%M} to {self.end:%Y-%m-%d %H:%M} UTC"


def console() -> Console:
    """The console of the analytics commands. Piped output (a file, ``grep``) is not cut to a
    terminal's width: tables are as wide as their content needs."""
    c = Console()
    return c if c.is_terminal else Console(width=PIPE_WIDTH)


PIPE_WIDTH = 1000  # wider than any table: rich sizes tables to their content, not to this


def when(text: str, option: str) -> datetime:
    """Parse an ISO 8601 time option (naive means UTC); typer.BadParameter names ``option``."""
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an ISO 8601 time", param_hint=option) from None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def query(
    agent: str | None,
    domain: str | None,
    tier: int | None,
    version: str | None,
    since: str,
    start: str | None,
    end: str | None,
    now: datetime | None = None,
) -> Query:
    """Build the :class:`Query` from the common options (raises typer.BadParameter)."""
    now = now or datetime.now(UTC)
    hi = when(end, "--to") if end else now
    if start:
        lo = when(start, "--from")
    else:
        try:
            lo = hi - parse_duration(since)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--since") from None
    if hi <= lo:
        raise typer.BadParameter("the range is empty (end <= start)", param_hint="--from/--to")
    return Query(Segment(agent, version, domain, tier), lo, hi)


@dataclass(frozen=True)
class Scope:
    """The scope and range options of a command as given (see :func:`scoped`); an option the
    command does not take is None."""

    agent: str | None
    domain: str | None
    tier: int | None
    version: str | None
    since: str
    start: str | None
    end: str | None

    def query(self, now: datetime | None = None) -> Query:
        """The :class:`Query` of these options (raises typer.BadParameter)."""
        return query(
            self.agent, self.domain, self.tier, self.version, self.since, self.start, self.end, now
        )


#: The segment options :func:`scoped` may give, by parameter name: (option, type).
SEGMENT_OPTIONS: dict[str, tuple[Any, Any]] = {
    "agent": (AGENT, str | None),
    "domain": (DOMAIN, str | None),
    "tier": (TIER, int | None),
    "version": (VERSION, str | None),
}


def scoped(
    *segment: str, since: Any = SINCE, before: str | None = None
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a command that reports on a scope and time range: the options ``segment`` names
    (of :data:`SEGMENT_OPTIONS`, in that order), then ``since`` (``--since``), ``--from`` and
    ``--to`` stand where the command declares its ``scope: Scope`` parameter (or, when that is
    keyword-only because options with defaults precede it, before the parameter ``before``),
    and the command is called with them as that one :class:`Scope`."""

    def decorate(command: Callable[..., T]) -> Callable[..., T]:
        signature = inspect.signature(command)
        params = [p for p in signature.parameters.values() if p.name != "scope"]
        names = [p.name for p in params]
        at = names.index(before) if before else list(signature.parameters).index("scope")
        options = [(name, *SEGMENT_OPTIONS[name]) for name in segment]
        options += [("since", since, str), ("start", FROM, str | None), ("end", TO, str | None)]
        given = [
            inspect.Parameter(
                name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=o, annotation=t
            )
            for name, o, t in options
        ]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> T:
            values = {name: kwargs.pop(name) for name, _, _ in options}
            scope = Scope(**{name: None for name in SEGMENT_OPTIONS} | values)
            return command(*args, scope=scope, **kwargs)

        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=params[:at] + given + params[at:]
        )
        return run

    return decorate


def duration(text: str, option: str) -> timedelta:
    """Parse a duration option (raises typer.BadParameter naming the option)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def run_with_engine(
    console: Console, fn: Callable[[AsyncEngine], Awaitable[T]], *, reads: bool = False
) -> T:
    """Run ``fn(engine)`` on the configured database (or the running ``monitor up``'s).

    ``reads=True`` (commands that write nothing): on ``database_read_url`` when set, and then a
    line on standard error says how far that replica is behind the primary. Otherwise on
    ``database_url``, the primary. Raises typer.Exit(2) when no database is configured or it
    cannot be reached.
    """
    settings = endpoints.resolve(load_settings())
    url = settings.reads_url if reads else settings.database_url
    if not url:
        console.print(
            "[red]no database[/]: set MONITOR_DATABASE_URL (or DATABASE_URL), or start "
            "`monitor up` in this directory"
        )
        raise typer.Exit(2)
    replica = reads and settings.database_read_url is not None

    async def go() -> T:
        engine = make_engine(url)
        try:
            if replica:
                source = await read_source(engine)
                if source.standby:
                    Console(stderr=True).print(f"[dim]{source.describe()}[/]", soft_wrap=True)
            return await fn(engine)
        finally:
            await engine.dispose()

    try:
        return asyncio.run(go())
    except (OSError, ConnectionError) as exc:
        console.print(f"[red]database unreachable[/]: {exc}")
        raise typer.Exit(2) from None


def jsonable(value: Any) -> Any:
    """Plain JSON values: NaN/inf -> None, datetimes -> ISO strings, tuples -> lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "to_dict"):
        return jsonable(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    return value


def print_json(payload: Any) -> None:
    """Print ``payload`` as indented JSON on standard output (no rich markup)."""
    typer.echo(json.dumps(jsonable(payload), indent=2, sort_keys=True))


def fmt(x: float | None, digits: int = 3) -> str:
    """A number for a table cell; ``-`` for None/NaN."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}"


#: Columns whose values are never cut: the names on-call searches for.
NAME_COLUMNS = frozenset({"agent", "rule", "name", "scope", "fingerprint"})


def titled_table(
    title: str, columns: Sequence[str], *, text: Collection[str] | None = None
) -> Table:
    """An empty table titled ``title`` (on the left) with ``columns``: the columns named in
    ``text`` left-justified and the others (numbers) right-justified; all left when ``text`` is
    None."""
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col, justify="left" if text is None or col in text else "right")
    return t


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` without ever truncating a name column (:data:`NAME_COLUMNS`).

    Name columns get the width of their longest value and never wrap; the other columns wrap
    to fit. When even that does not fit the console (a narrow terminal), the rows are printed
    as blocks instead: the row's first name, then one ``header: value`` line per column.
    """
    widths: dict[int, int] = {}
    for i, column in enumerate(table.columns):
        header = str(column.header)
        texts = [
            c.plain if isinstance(c, Text) else Text.from_markup(str(c)).plain for c in column.cells
        ]
        if header.lower() in NAME_COLUMNS:
            column.no_wrap = True
            widths[i] = max([len(header), *(len(t) for t in texts)])
        else:  # wraps between words, never narrower than its longest word
            widths[i] = max(len(w) for t in [header, *texts] for w in t.split() or [""])
        column.min_width = widths[i]
    needed = sum(widths.values()) + 3 * len(widths) + 1  # cell padding and borders
    if needed <= console.width:
        console.print(table)
        return
    if table.title:
        console.print(table.title, soft_wrap=True)
    headers = [str(c.header) for c in table.columns]
    names = [i for i, h in enumerate(headers) if h.lower() in NAME_COLUMNS]
    first = names[0] if names else 0  # each block starts with the row's name
    rows = list(zip(*(list(c.cells) for c in table.columns), strict=True))
    for row in rows:
        console.print(row[first], soft_wrap=True, highlight=False)
        for i, (header, value) in enumerate(zip(headers, row, strict=True)):
            if i != first:
                console.print(
                    f"  [dim]{escape(header)}:[/] ", value, sep="", soft_wrap=True, highlight=False
                )
