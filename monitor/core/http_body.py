"""Reading an HTTP request body under limits, framework-neutral (the worker passes a chunk
reader).

:func:`read_body` refuses before working: a declared ``Content-Length`` above ``max_bytes`` is
refused without reading; while streaming, the raw bytes and the decoded bytes are each capped
at ``max_bytes`` and the decompression ratio at ``max_ratio`` (:mod:`monitor.core.inflate`);
the whole body must arrive within ``timeout_s`` (a trickling client is cut). Decoding runs in
pieces of at most 64 KiB with a yield to the event loop between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from monitor.core.errors import BadEncoding, BodyTimeout, BodyTooLarge, Busy, UnsupportedEncoding
from monitor.core.inflate import Inflater

#: Reads a request body's next chunk (``b""`` at its end).
ReadChunk = Callable[[], Awaitable[bytes]]


@dataclass(frozen=True)
class BodyLimits:
    """Largest body (raw and decoded), largest decompression ratio, longest read (seconds)."""

    max_bytes: int
    max_ratio: float = 100.0
    timeout_s: float = 10.0


@asynccontextmanager
async def body_slot(slots: asyncio.Semaphore | None, wait_s: float) -> AsyncIterator[None]:
    """Holds one of ``slots`` (the bodies read and parsed at once, which bounds their memory)
    for the block; raises Busy when none frees up within ``wait_s``. None: no bound."""
    if slots is None:
        yield
        return
    try:
        async with asyncio.timeout(wait_s):
            await slots.acquire()
    except TimeoutError:
        raise Busy(f"every body slot stayed busy for {wait_s:g} s: retry later") from None
    try:
        yield
    finally:
        slots.release()


def declared_too_large(content_length: str | None, limits: BodyLimits) -> bool:
    """True when the ``Content-Length`` header alone is above ``max_bytes``."""
    declared = (content_length or "").strip()
    return declared.isdigit() and int(declared) > limits.max_bytes


async def read_body(
    read_chunk: ReadChunk,
    *,
    content_length: str | None,
    content_encoding: str | None,
    limits: BodyLimits,
) -> bytes:
    """The decoded body; ``read_chunk`` returns the next raw bytes, ``b""`` at the end.

    Raises:
        BodyTooLarge, BodyTimeout, BadEncoding (:mod:`monitor.core.errors`);
        UnsupportedEncoding (-> 415) before anything is read.
    """
    inflater = Inflater(content_encoding or "identity", limits.max_bytes, limits.max_ratio)
    if declared_too_large(content_length, limits):
        raise BodyTooLarge(f"body over {limits.max_bytes} bytes")
    pieces: list[bytes] = []
    try:
        async with asyncio.timeout(limits.timeout_s):
            while chunk := await read_chunk():
                if inflater.read + len(chunk) > limits.max_bytes:
                    raise BodyTooLarge(f"body over {limits.max_bytes} bytes")
                for piece in inflater.feed(chunk):
                    pieces.append(piece)
                    if inflater.encoding != "identity":
                        await asyncio.sleep(0)  # the loop serves others between pieces
            inflater.finish()
    except TimeoutError:
        raise BodyTimeout(f"the body did not arrive within {limits.timeout_s:g} s") from None
    return b"".join(pieces)


# The body errors are defined in monitor.core.errors; they are named here too for the
# endpoints that import them beside read_body.
__all__ = [
    "BadEncoding",
    "BodyLimits",
    "BodyTimeout",
    "BodyTooLarge",
    "Busy",
    "UnsupportedEncoding",
    "body_slot",
    "declared_too_large",
    "read_body",
]
