"""Which store errors are worth waiting for, and which mean "this batch holds poison".

:func:`is_transient` decides it from the exception type and, for a Postgres error, the class
of its SQLSTATE (the first two characters). The table is documented in docs/robustness.md:

=====================  ===========  ======================================================
SQLSTATE class / type  verdict      why
=====================  ===========  ======================================================
08 connection          transient    the server went away; reconnect and retry
25 transaction state   transient    a broken session; a new one works
40 rollback            transient    serialization failure, deadlock: retrying succeeds
42 syntax / access     transient    a missing table or privilege is a deployment problem
                                    (migrations not applied): wait for the operator, never
                                    dead-letter good events because of it
53 resources           transient    disk full, out of memory, too many connections
55 prerequisite state  transient    lock not available, database not accepting connections
57 operator            transient    admin shutdown, cannot connect now, query canceled
58 system, XX internal transient    I/O error on the server
22 data exception      rejected     untranslatable character, value out of range, bad input
23 integrity           rejected     a constraint the rows break
54 limit exceeded      rejected     a row or value too large
other classes          rejected     isolated by bisection (a systemic one rejects every
                                    event of the batch and is logged as such)
OSError, TimeoutError  transient    network
asyncpg InterfaceError transient    connection-level client error
OverflowError,         rejected     asyncpg could not encode a value of this batch
ValueError, TypeError,
other exceptions
=====================  ===========  ======================================================

"Rejected" errors make the ingest loop bisect the batch: the events that the store takes are
written, each event it refuses on its own is dead-lettered with reason ``store_rejected`` and
the database's message (monitor.ingest.loop).
"""

from __future__ import annotations

import asyncio

import asyncpg

TRANSIENT_SQLSTATE_CLASSES = frozenset({"08", "25", "40", "42", "53", "55", "57", "58", "XX"})


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a Postgres error (asyncpg), else None."""
    code = getattr(exc, "sqlstate", None)
    return code if isinstance(code, str) else None


def is_transient(exc: BaseException) -> bool:
    """True when retrying the same write later can succeed (see the module table)."""
    if isinstance(exc, asyncpg.PostgresError):
        code = sqlstate(exc)
        return code is None or code[:2] in TRANSIENT_SQLSTATE_CLASSES
    if isinstance(exc, asyncpg.InterfaceError):
        return not isinstance(exc, ValueError)  # asyncpg's argument-encoding errors are data
    return isinstance(exc, OSError | asyncio.TimeoutError | TimeoutError)


def describe(exc: BaseException) -> str:
    """``<SQLSTATE> <message>`` (or ``<exception class>: <message>``), for dead letters."""
    code = sqlstate(exc)
    text = str(exc) or type(exc).__name__
    return f"{code} {text}" if code else f"{type(exc).__name__}: {text}"
