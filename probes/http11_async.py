"""The probes' lean HTTP/1.1 GET (the wire format of `probes/http11.py`) on an event loop: the
sweep's probe calls on the probe loop (`probes/loop.py`) instead of a thread each, and a
blocking caller's on the shared probe loop.

Why: with 64 reads in flight, each on its own thread blocked in `recv`, every answer wakes a
thread that must take the GIL from the sweep's own thread, which then waits its turn to
conclude rounds. A whole `http_json` read at 64 in flight, 20 ms of latency each, cost
0.34-0.40 ms of CPU on threads and 0.30-0.32 ms as tasks on one loop (the wire alone, asyncio
on uvloop with httptools: 0.08-0.10 ms); in the reconcile benchmark, where the sweep's thread
needs the GIL too, the sweep's CPU per operation fell from 0.75-0.90 ms to about 0.63 ms
(bench/README.md, `reconcile`).

It does what the blocking client it replaced did (tests/test_probe_http11.py): the request
head of `request_head`, the parsing and limits of `Parsed`, the decoding; the timeout on the
connect (and the TLS handshake) and on every wait for bytes; a connection reused only after its
answer was read to the end, the server keeping it open and nothing sent past the answer, and
never once the server closed it while it was idle (the loop tells: `connection_lost`). The body
of an answer the caller does not read is not read either, and the connection goes with it.

Sources relied on: the asyncio docs (Transports and Protocols: `data_received`,
`eof_received`, `connection_lost`, `pause_reading`; `loop.create_connection` with `ssl`,
`server_hostname` and `ssl_handshake_timeout`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import cast

import httpx

from probes.decoding import decode, decoders_for
from probes.http11 import DEFAULT_HEADERS, Parsed, origin_of, request_head


class _Wire(asyncio.Protocol):
    """One connection: its transport, and the answer being parsed off it, if any."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parsed: Parsed | None = None
        self.closed = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.parsed is None:  # bytes while idle: the server broke the protocol
            self.closed = True
            self.close()
            return
        self._feed(data)
        if self.parsed is not None and not self.parsed.complete and self.transport:
            # Held until the caller took what came: a fast server cannot grow the buffer
            # past what one read brings.
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.closed = True
        if self.parsed is not None:
            self._feed(b"")
        return False  # close our end too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.parsed is not None and self._error is None:
            if exc is not None and not self.parsed.complete:
                self._error = httpx.ReadError(type(exc).__name__)
            else:
                self._feed(b"")  # a close without eof_received: the same end of the bytes
        self._wake()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def more(self, timeout: float) -> None:
        """Wait, at most `timeout`, for the parse to move on (or fail)."""
        if self._error is None and self.transport is not None and not self.closed:
            self.transport.resume_reading()
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await self._waiter
            except TimeoutError:
                raise httpx.ReadTimeout("timed out reading the answer") from None
            finally:
                self._waiter = None
        if self._error is not None:
            raise self._error
        if self.closed and self.parsed is not None and not self.parsed.complete:
            raise httpx.ReadError("the connection was lost")

    def _feed(self, data: bytes) -> None:
        assert self.parsed is not None
        try:
            self.parsed.feed(data)
        except httpx.RemoteProtocolError as exc:
            self._error = exc
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class AsyncResponse:
    """One answer on an event loop: `status_code`, `headers` and the body through
    `aiter_bytes`, decoded."""

    def __init__(self, wire: _Wire, parsed: Parsed, timeout: float) -> None:
        self._wire, self._parsed, self._timeout = wire, parsed, timeout
        self.status_code = parsed.status_code
        self.headers = parsed.headers
        self._read_out = False

    @property
    def reusable(self) -> bool:
        """As `http11.Response.reusable`, and the server has not closed the connection."""
        parsed = self._parsed
        return (self._read_out and parsed.keep_alive and not parsed.overrun
                and not self._wire.closed)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        decoders = decoders_for(self.headers)
        parsed = self._parsed
        while True:
            for chunk in parsed.take_body():
                for piece in decode(decoders, chunk):
                    yield piece
            if parsed.complete:
                break
            await self._wire.more(self._timeout)
        for piece in decode(decoders, b"", end=True):
            yield piece
        self._read_out = True


class AsyncConnection:
    """`http11.Connection` on an event loop: GETs to one origin after another, one connection
    per origin, used by one call at a time."""

    def __init__(self, headers: Mapping[str, str], tls: ssl.SSLContext) -> None:
        self._headers = {**DEFAULT_HEADERS, **{k.lower(): v for k, v in headers.items()}}
        self._tls = tls
        self._open: dict[tuple[str, str, int], _Wire] = {}

    @asynccontextmanager
    async def stream(self, url: str, *, params: Mapping[str, str] | None = None,
                     headers: Mapping[str, str] | None = None,
                     timeout: float) -> AsyncIterator[AsyncResponse]:
        """GET `url` and yield the answer, its body not yet read; the connection is kept for
        the next request only when the body was read to the end."""
        target = httpx.URL(url) if params is None else httpx.URL(url, params=params)
        head = request_head(target, self._headers if not headers else {
            **self._headers, **{k.lower(): v for k, v in headers.items()}})
        origin = origin_of(target)
        wire = self._open.get(origin)
        if wire is None or wire.closed or wire.transport is None or wire.transport.is_closing():
            wire = self._open[origin] = await _connect(origin, timeout, self._tls)
        response = None
        try:
            assert wire.transport is not None
            wire.parsed = parsed = Parsed()
            try:
                wire.transport.write(head)
            except (OSError, RuntimeError) as exc:  # uvloop: RuntimeError on a closed handle
                raise httpx.WriteError(type(exc).__name__) from None
            while not parsed.head_done:
                await wire.more(timeout)
            response = AsyncResponse(wire, parsed, timeout)
            yield response
        finally:
            wire.parsed = None
            if response is None or not response.reusable:
                del self._open[origin]
                wire.close()

    def close(self) -> None:
        for wire in self._open.values():
            wire.close()
        self._open.clear()


async def _connect(origin: tuple[str, str, int], timeout: float, tls: ssl.SSLContext) -> _Wire:
    scheme, host, port = origin
    loop = asyncio.get_running_loop()
    secure = scheme == "https"
    try:
        async with asyncio.timeout(timeout):
            _, wire = await loop.create_connection(
                _Wire, host, port, ssl=tls if secure else None,
                server_hostname=host if secure else None,
                ssl_handshake_timeout=timeout if secure else None)
    except TimeoutError:
        raise httpx.ConnectTimeout("timed out connecting") from None
    except OSError as exc:  # ssl.SSLError (a certificate refused) among them
        raise httpx.ConnectError(type(exc).__name__) from None
    return wire
