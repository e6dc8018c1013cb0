"""The probes' one lean HTTP/1.1 client: a GET on an event loop (the sweep's probe calls on the
probe loop, `probes/loop.py`, instead of a thread each, and a blocking caller's on the shared
probe loop), the request's head and the answer's parsing by httptools (llhttp, the C parser
uvicorn and Node.js use), under the retries and bounds of `probes/transport.py`.

Why not httpx here, nor `http.client`: with 64 probe calls in flight (the reconcile
benchmark's setup), a read through `httpx.Client` over its default transport (httpcore and h11,
pure Python) took 0.76-0.99 ms of CPU, and `http.client` 0.13-0.17 ms, much of it parsing the
answer's head with the `email` package; this wire 106-115 us blocking, less on the probe loop
(bench/README.md, `reconcile`).

Why an event loop: with 64 reads in flight, each on its own thread blocked in `recv`, every
answer wakes a thread that must take the GIL from the sweep's own thread, which then waits its
turn to conclude rounds. A whole `http_json` read at 64 in flight, 20 ms of latency each, cost
0.34-0.40 ms of CPU on threads and 0.30-0.32 ms as tasks on one loop (the wire alone, asyncio
on uvloop with httptools: 0.08-0.10 ms); in the reconcile benchmark, where the sweep's thread
needs the GIL too, the sweep's CPU per operation fell from 0.75-0.90 ms to about 0.63 ms
(bench/README.md, `reconcile`). The blocking client beside it is gone (issue 35): every probe
read goes over the event loop, a blocking caller's included (`probes/loop.py`, `wait_for`).

The pieces: `request_head` and `ResponseParser` are the wire format, sans I/O (they neither
read nor write); `LeanClient` keeps one connection per origin (`_Wire`, an asyncio protocol)
and hands out each answer as a `StreamedResponse`, its body read as the caller asks for it.
Below `transport.aget`, the framework's one seam to the wire, the client stands in for
`httpx.Client(follow_redirects=False, verify=<the same SSL context>)` and does what it did:

- the same URL: `httpx.URL` builds and checks it (params, when given, make the query, as in
  `httpx.Request`; percent-encoded as httpx does; a malformed URL raises `httpx.InvalidURL`);
- the same request headers: Host (`url.netloc`, as httpx sends it), and httpx's defaults
  (Accept, Accept-Encoding: gzip, deflate, Connection: keep-alive, User-Agent), the caller's on
  top: a provider sees one client whichever path a probe takes; a header name that is not a
  token, or a value with a line break or NUL, is never sent (`httpx.LocalProtocolError`);
- no redirect followed: a 3xx is the answer;
- Content-Length, chunked and read-to-close bodies (llhttp frames them; a body cut short is
  `httpx.RemoteProtocolError`, as is an answer's head past `MAX_HEAD` bytes or `MAX_HEADERS`
  fields, the limits `http.client` kept), interim 1xx answers skipped, gzip and deflate
  decoded (`probes/decoding.py`) in pieces of at most 64 KiB, so the caller's size cap holds
  on what a small compressed body expands to;
- errors raised as httpx's own exception classes, so `transport` maps httpx's path and this
  one to `_Transient` or `FetchError` the one way.

The timeout is on the connect (and the TLS handshake) and on every wait for bytes; a
connection is reused only after its answer was read to the end, the server keeping it open and
nothing sent past the answer, and never once the server closed it while it was idle (the loop
tells: `connection_lost`). The body of an answer the caller does not read is not read either,
and the connection goes with it.

What it does not do: methods other than GET, proxies (`transport.Clients` uses httpx whenever
the environment names one), cookies (none kept, none sent: a probe call starts without any
anyway), HTTP/2, brotli or zstd (never asked for).

Sources relied on: httptools 0.6's README and parser.pyx (the callbacks; `should_keep_alive`
read in `on_message_complete`, as llhttp's docs ask; a body that ends at the close never
completes a message, hence the check at EOF in `ResponseParser.feed`), RFC 9112 sections 6.3
(how a response's body is framed) and 5.5 (field values), CPython 3.11's Lib/http/client.py
(the head limits and the Host header), httpx 0.28's `_client.py` and `_models.py` (default
headers, the query from params, Host from `url.netloc`) and `_decoders.py` (unknown content
codings are passed through, deflate may come raw or zlib-wrapped), the asyncio docs
(Transports and Protocols: `data_received`, `eof_received`, `connection_lost`,
`pause_reading`; `loop.create_connection` with `ssl`, `server_hostname` and
`ssl_handshake_timeout`).
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import cast

import httptools
import httpx

from probes.decoding import decode, decoders_for

#: An answer's head (status line and fields) may take this many bytes and fields at most:
#: `http.client`'s limits (`_MAXLINE`, `_MAXHEADERS`), so a server cannot grow it unbounded.
MAX_HEAD = 64 * 1024
MAX_HEADERS = 100

#: What httpx.Client sends by default (httpx/_client.py); br and zstd only with their packages,
#: which a probe never needs.
DEFAULT_HEADERS = {"accept": "*/*", "accept-encoding": "gzip, deflate",
                   "connection": "keep-alive", "user-agent": f"python-httpx/{httpx.__version__}"}

#: RFC 9110 section 5.6.2: a field name is a token.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: A line break or NUL in a value would end the field or the head early (RFC 9110 5.5).
_UNSAFE_VALUE = re.compile(r"[\r\n\x00]")
#: What httpx.URL's raw path never holds once percent-encoded; checked again before it is sent.
_UNSAFE_TARGET = re.compile(r"[\x00-\x20\x7f]")


class ResponseParser:
    """One answer as httptools parses it, fed the bytes a connection reads (sans I/O: the
    client, `LeanClient`, does the reading): `status_code`, `headers` (lower-case names,
    repeated ones joined by ", " as `httpx.Headers.get` joins them) once `head_done`, body
    pieces through `take_body` until `complete`. It is httptools' protocol object: the parser
    calls the `on_*` methods."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.status_code = 0
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.complete = False
        #: The server keeps the connection open after this answer (HTTP/1.1, or 1.0 asked).
        self.keep_alive = False
        #: Bytes came past the end of the answer: the connection is not to be reused.
        self.overrun = False
        self._head_bytes = 0
        self._fields = 0
        self._body: list[bytes] = []

    def take_body(self) -> list[bytes]:
        """The body's pieces parsed since the last call."""
        body, self._body = self._body, []
        return body

    def feed(self, data: bytes) -> None:
        """Parse what the connection read; b"" is the server's close, which ends a body
        framed by the close and is `httpx.RemoteProtocolError` for any other answer cut
        short."""
        if not data:
            if self.complete:
                return
            if self.head_done and "content-length" not in self.headers and not _chunked(
                    self.headers.get("transfer-encoding", "")):
                self.complete = True  # RFC 9112 6.3: this body is framed by the close
                return
            raise httpx.RemoteProtocolError(
                "the answer ended short of its length" if self.head_done
                else "the server closed the connection without an answer")
        if not self.head_done:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            raise httpx.RemoteProtocolError("an upgrade nobody asked for") from None
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, httpx.RemoteProtocolError):
                raise exc.__context__ from None  # a limit of ours, raised in a callback
            if not self.complete:
                raise httpx.RemoteProtocolError(type(exc).__name__) from None
            self.overrun = True  # garbage after a whole answer: the answer stands
        if not self.head_done and self._head_bytes > MAX_HEAD:
            raise httpx.RemoteProtocolError(f"the answer's head is past {MAX_HEAD} bytes")

    # httptools' callbacks.

    def on_message_begin(self) -> None:
        if self.complete:
            self.overrun = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.complete:
            return
        self._fields += 1
        if self._fields > MAX_HEADERS:
            raise httpx.RemoteProtocolError(f"more than {MAX_HEADERS} header fields")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = self.headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        if not self.complete:
            self.status_code = self._parser.get_status_code()
            self.head_done = not 100 <= self.status_code < 200

    def on_body(self, body: bytes) -> None:
        if not self.complete:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self.complete:
            return
        if 100 <= self.status_code < 200:
            # An interim answer (100 Continue, 103 Early Hints): the real one follows.
            self.headers, self._fields, self.status_code = {}, 0, 0
            return
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()


def origin_of(url: httpx.URL) -> tuple[str, str, int]:
    """Where `url` connects: scheme, host (IDNA-encoded, as httpx connects and sends it), port."""
    if url.scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"unsupported scheme {url.scheme!r}")
    return (url.scheme, url.raw_host.decode("ascii"),
            url.port or (443 if url.scheme == "https" else 80))


def request_head(url: httpx.URL, headers: Mapping[str, str]) -> bytes:
    """The request's head, or `httpx.LocalProtocolError` for anything that would break it."""
    path = url.raw_path.decode("ascii")
    if _UNSAFE_TARGET.search(path):
        raise httpx.LocalProtocolError("the request target holds a control character")
    lines = [f"GET {path} HTTP/1.1"]
    if "host" not in headers:
        lines.append(f"host: {url.netloc.decode('ascii')}")
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name) or _UNSAFE_VALUE.search(value):
            raise httpx.LocalProtocolError("a header that would break the request's head")
        lines.append(f"{name}: {value}")
    lines.append("\r\n")
    try:
        return "\r\n".join(lines).encode("latin-1")
    except UnicodeEncodeError:
        raise httpx.LocalProtocolError("a header value outside Latin-1") from None


def _chunked(codings: str) -> bool:
    # RFC 9112 6.3: a response's body is chunked when chunked is its last transfer coding.
    return codings.rsplit(",", 1)[-1].strip().lower() == "chunked"


class _Wire(asyncio.Protocol):
    """One connection: its transport, and the answer being parsed off it, if any."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parsed: ResponseParser | None = None
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


class StreamedResponse:
    """One answer, its body still on the connection: `status_code`, `headers` and the body
    through `aiter_bytes`, decoded as it is read."""

    def __init__(self, wire: _Wire, parsed: ResponseParser, timeout: float) -> None:
        self._wire, self._parsed, self._timeout = wire, parsed, timeout
        self.status_code = parsed.status_code
        self.headers = parsed.headers
        self._read_out = False

    @property
    def reusable(self) -> bool:
        """Whether the connection may carry the next request: the body read to the end, the
        server keeping the connection open, nothing sent past the answer, and the server not
        having closed it since."""
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


class LeanClient:
    """The lean client: GETs on an event loop, to one origin after another, one connection
    kept per origin, used by one call at a time."""

    def __init__(self, headers: Mapping[str, str], tls: ssl.SSLContext) -> None:
        self._headers = {**DEFAULT_HEADERS, **{k.lower(): v for k, v in headers.items()}}
        self._tls = tls
        self._open: dict[tuple[str, str, int], _Wire] = {}

    @asynccontextmanager
    async def stream(self, url: str, *, params: Mapping[str, str] | None = None,
                     headers: Mapping[str, str] | None = None,
                     timeout: float) -> AsyncIterator[StreamedResponse]:
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
            wire.parsed = parsed = ResponseParser()
            try:
                wire.transport.write(head)
            except (OSError, RuntimeError) as exc:  # uvloop: RuntimeError on a closed handle
                raise httpx.WriteError(type(exc).__name__) from None
            while not parsed.head_done:
                await wire.more(timeout)
            response = StreamedResponse(wire, parsed, timeout)
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
