"""Content codings of a probe's answers, decoded as httpx decodes them (httpx 0.28's
`_decoders.py`: each coding named, in order; unknown ones passed through; deflate raw or
zlib-wrapped), in pieces of at most `CHUNK` bytes, so a size cap holds on what a small
compressed body expands to."""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from typing import Protocol

import httpx

#: The most bytes one decompression step hands back.
CHUNK = 64 * 1024


class _Decoder(Protocol):
    def decompress(self, data: bytes, max_length: int = ...) -> bytes: ...

    def flush(self) -> bytes: ...

    @property
    def unconsumed_tail(self) -> bytes: ...


def decoders_for(headers: Mapping[str, str]) -> list[_Decoder]:
    """The decoders of the answer's Content-Encoding: as httpx, each coding named, in order;
    codings it cannot decode are passed through."""
    decoders: list[_Decoder] = []
    for coding in (part.strip().lower() for part in headers.get("content-encoding", "").split(",")):
        if coding in ("gzip", "x-gzip"):
            decoders.append(zlib.decompressobj(zlib.MAX_WBITS | 16))
        elif coding == "deflate":
            decoders.append(_Deflate())
    return decoders


class _Deflate:
    """"deflate" is zlib-wrapped by the RFC, raw from some servers: the first bytes tell which."""

    def __init__(self) -> None:
        self._inner: _Decoder | None = None

    @property
    def unconsumed_tail(self) -> bytes:
        return self._inner.unconsumed_tail if self._inner is not None else b""

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        if self._inner is None and data:
            self._inner = zlib.decompressobj()
            try:
                return self._inner.decompress(data, max_length)
            except zlib.error:
                self._inner = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._inner.decompress(data, max_length) if self._inner is not None else b""

    def flush(self) -> bytes:
        return self._inner.flush() if self._inner is not None else b""


def decode(decoders: list[_Decoder], chunk: bytes, end: bool = False) -> Iterator[bytes]:
    """`chunk` through each decoder in turn, handed on in pieces of at most CHUNK bytes; `end`
    flushes what the decoders still hold."""
    if not decoders:
        if chunk:
            yield chunk
        return
    first, rest = decoders[0], decoders[1:]
    try:
        piece = first.decompress(chunk, CHUNK)
        while piece or first.unconsumed_tail:
            yield from decode(rest, piece)
            piece = first.decompress(first.unconsumed_tail, CHUNK)
        if end:
            yield from decode(rest, first.flush(), end=True)
    except zlib.error as exc:
        raise httpx.DecodingError(f"undecodable body: {exc}") from None
