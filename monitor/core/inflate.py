"""Streamed request-body decompression with an output cap and a ratio cap (pure).

:class:`Inflater` decodes ``Content-Encoding`` ``identity``, ``gzip`` (``x-gzip``) and
``deflate`` piece by piece: each call to zlib produces at most ``STEP`` bytes, and the caps are
checked after every piece, so a body that inflates past ``max_bytes``, or past ``max_ratio``
times the compressed bytes decoded so far (once ``ratio_floor`` bytes came out), is refused after
at most ``max_bytes + STEP`` bytes of work, never inflated whole. The caller may yield to its
event loop between pieces.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from monitor.core.errors import BadEncoding, BodyTooLarge, UnsupportedEncoding

STEP = 64 * 1024
IDENTITY = ("", "identity")
GZIP = ("gzip", "x-gzip")
DEFLATE = ("deflate",)


def encoding_of(header: str | None) -> str:
    """The normalized encoding of a ``Content-Encoding`` header; raises UnsupportedEncoding."""
    encoding = (header or "").strip().lower()
    if encoding in IDENTITY:
        return "identity"
    if encoding in GZIP:
        return "gzip"
    if encoding in DEFLATE:
        return "deflate"
    raise UnsupportedEncoding(
        f"Content-Encoding {header!r} is not supported: use gzip, deflate or identity"
    )


class Inflater:
    """Decodes one body fed in chunks; :meth:`feed` yields the decoded pieces."""

    def __init__(
        self, encoding: str, max_bytes: int, max_ratio: float, ratio_floor: int = 1024 * 1024
    ) -> None:
        self.encoding = encoding_of(encoding)
        self.max_bytes = max_bytes
        self.max_ratio = max_ratio
        self.ratio_floor = ratio_floor
        self.read = 0  # encoded bytes fed
        self.consumed = 0  # encoded bytes decoded so far (the ratio's denominator)
        self.produced = 0  # decoded bytes
        self._z = self._new() if self.encoding != "identity" else None

    def _new(self) -> zlib._Decompress:
        return zlib.decompressobj(wbits=31 if self.encoding == "gzip" else 15)

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded pieces of ``data`` (each at most ``STEP`` bytes for gzip/deflate).

        Raises:
            BodyTooLarge: the decoded body passed ``max_bytes`` or the ratio cap.
            BadEncoding: ``data`` is not valid for the encoding.
        """
        self.read += len(data)
        if self._z is None:
            self.consumed += len(data)
            self._count(len(data))
            if data:
                yield data
            return
        pending = data
        while pending:
            try:
                piece = self._z.decompress(pending, STEP)
            except zlib.error as exc:
                raise BadEncoding(f"{self.encoding} body cannot be decoded: {exc}") from None
            before, pending = len(pending), self._z.unconsumed_tail
            if self._z.eof:  # a gzip file may hold several members, one after the other
                pending = self._z.unused_data + pending
                if pending and self.encoding != "gzip":
                    raise BadEncoding("data after the end of the deflate stream")
                if pending:
                    self._z = self._new()
            self.consumed += before - len(pending)
            self._count(len(piece))
            if piece:
                yield piece

    def finish(self) -> None:
        """Checks the encoded stream ended; raises BadEncoding for a truncated body."""
        if self._z is not None and self.read and not self._z.eof:
            raise BadEncoding(f"{self.encoding} body is truncated")

    def _count(self, n: int) -> None:
        self.produced += n
        if self.produced > self.max_bytes:
            raise BodyTooLarge(f"decompressed body is over the limit of {self.max_bytes} bytes")
        if (
            self._z is not None
            and self.produced > self.ratio_floor
            and self.produced > self.max_ratio * self.consumed
        ):
            raise BodyTooLarge(
                f"{self.encoding} body inflates more than {self.max_ratio:g} times: refused"
            )
