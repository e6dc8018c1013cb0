"""A lean HTTP/1.1 GET for probes: the standard library's `http.client` on blocking sockets, one
keep-alive connection per origin, under the retries and bounds of `probes/transport.py`.

Why not httpx here: with 64 probe calls in flight on threads (the reconcile benchmark's setup),
a read through `httpx.Client` over its default transport (httpcore and h11, pure Python) took
0.76-0.99 ms of CPU, `httpx.Client` over an `http.client` transport 0.28-0.32 ms, and
`http.client` alone 0.13-0.17 ms (urllib3 0.20-0.24 ms; a minimal asyncio client on one loop
thread, the probe threads handing it their reads, 0.14-0.16 ms). Below `transport.get`, the
framework's one seam to the wire, this stands in for `httpx.Client(follow_redirects=False,
verify=<the same SSL context>)` and does what it did:

- the same URL: `httpx.URL` builds and checks it (params, when given, make the query, as in
  `httpx.Request`; percent-encoded as httpx does; a malformed URL raises `httpx.InvalidURL`);
- the same request headers: Host, and httpx's defaults (Accept, Accept-Encoding: gzip, deflate,
  Connection: keep-alive, User-Agent), the caller's on top: a provider sees one client whichever
  path a probe takes;
- no redirect followed (`http.client` follows none): a 3xx is the answer;
- HTTPS through the given SSL context: certificate verification and the hostname check;
- the timeout on the connect and on every socket read and write;
- Content-Length, chunked and read-to-close bodies (`http.client`; a body cut short is
  `httpx.RemoteProtocolError`), gzip and deflate decoded (zlib) in pieces of at most `CHUNK`
  bytes, so the caller's size cap holds on what a small compressed body expands to;
- errors raised as httpx's own exception classes (`ConnectTimeout`, `ReadTimeout`,
  `ConnectError`, `ReadError`, `RemoteProtocolError`, `DecodingError`...), so `transport.get`
  maps both paths to `_Transient` or `FetchError` the one way;
- a connection reused only after its response was read to the end, unless the server said it
  would close it, and dropped before reuse when the server has closed its end while it was idle
  (a readable idle socket: httpcore checks the same before it reuses a connection).

What it does not do: proxies (`transport.Clients` uses httpx whenever the environment names one),
cookies (none kept, none sent: a probe call starts without any anyway), HTTP/2, brotli or zstd
(never asked for).

Sources relied on: the `http.client` docs and CPython 3.11's Lib/http/client.py (`read1` does
one system call at most and does not raise on a short Content-Length body, hence the check
here; `getresponse` closes the connection when the response will close it), httpx 0.28's
`_client.py` and `_models.py` (default headers, the query from params) and `_decoders.py`
(unknown content codings are passed through, deflate may come raw or zlib-wrapped).
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

import httpx

#: The most bytes one read (or one decompression step) hands back.
CHUNK = 64 * 1024

#: What httpx.Client sends by default (httpx/_client.py); br and zstd only with their packages,
#: which a probe never needs.
DEFAULT_HEADERS = {"accept": "*/*", "accept-encoding": "gzip, deflate",
                   "connection": "keep-alive", "user-agent": f"python-httpx/{httpx.__version__}"}


class _Decoder(Protocol):
    def decompress(self, data: bytes, max_length: int = ...) -> bytes: ...

    def flush(self) -> bytes: ...

    @property
    def unconsumed_tail(self) -> bytes: ...


class Response:
    """One answer: `status_code`, `headers` (lower-case names, repeated ones joined by ", " as
    `httpx.Headers.get` joins them) and the body through `iter_bytes`, decoded."""

    def __init__(self, raw: http.client.HTTPResponse) -> None:
        self._raw = raw
        self.status_code = raw.status
        headers: dict[str, str] = {}
        for name, value in raw.getheaders():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        self.headers = headers

    def close(self) -> None:
        self._raw.close()

    @property
    def complete(self) -> bool:
        """Whether the body was read to its end (http.client then lets go of it)."""
        return self._raw.isclosed()

    def iter_bytes(self) -> Iterator[bytes]:
        decoders = _decoders(self.headers.get("content-encoding", ""))
        for chunk in self._chunks():
            yield from _decode(decoders, chunk)
        yield from _decode(decoders, b"", end=True)

    def _chunks(self) -> Iterator[bytes]:
        raw = self._raw
        while True:
            if not raw.chunked and raw.length == 0:
                raw.read()  # b"": marks the body read, so the connection may serve the next GET
                return
            try:
                chunk = raw.read1(CHUNK)
            except TimeoutError:
                raise httpx.ReadTimeout("timed out reading the body") from None
            except http.client.HTTPException as exc:
                raise httpx.RemoteProtocolError(type(exc).__name__) from None
            except OSError as exc:
                raise httpx.ReadError(type(exc).__name__) from None
            if not chunk:
                if raw.length:  # the server closed before Content-Length bytes came
                    raise httpx.RemoteProtocolError("the body ended short of its length")
                return
            yield chunk


class Connection:
    """GETs to one origin after another (per scheme, host and port, one connection each), with
    `headers` on every request; used by one call at a time, like the httpx.Client it replaces."""

    def __init__(self, headers: Mapping[str, str], tls: ssl.SSLContext) -> None:
        self._headers = {**DEFAULT_HEADERS, **{k.lower(): v for k, v in headers.items()}}
        self._tls = tls
        self._open: dict[tuple[str, str, int], http.client.HTTPConnection] = {}

    @contextmanager
    def stream(self, method: str, url: str, *, params: Mapping[str, str] | None = None,
               headers: Mapping[str, str] | None = None,
               timeout: float) -> Iterator[Response]:
        """Send `method url` and yield the answer, its body not yet read; the connection is
        kept for the next request only when the body was read to the end."""
        target = httpx.URL(url) if params is None else httpx.URL(url, params=params)
        conn = self._connection(target, timeout)
        try:
            _send(conn, method, target, {**self._headers,
                                         **{k.lower(): v for k, v in (headers or {}).items()}})
            response = Response(_receive(conn))
        except BaseException:
            conn.close()
            raise
        try:
            yield response
        finally:
            if not response.complete:
                response.close()  # a response that will close holds the socket itself
                conn.close()

    def close(self) -> None:
        for conn in self._open.values():
            conn.close()
        self._open.clear()

    def _connection(self, url: httpx.URL, timeout: float) -> http.client.HTTPConnection:
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {url.scheme!r}")
        port = url.port or (443 if url.scheme == "https" else 80)
        host = url.raw_host.decode("ascii")  # IDNA-encoded, as httpx connects and sends it
        origin = (url.scheme, host, port)
        conn = self._open.get(origin)
        if conn is None:
            conn = self._open[origin] = (
                http.client.HTTPSConnection(host, port, context=self._tls)
                if url.scheme == "https" else http.client.HTTPConnection(host, port))
        conn.timeout = timeout
        if conn.sock is not None and _readable(conn.sock):
            conn.close()  # idle yet readable: the server closed it (or broke the protocol)
        if conn.sock is None:
            try:
                conn.connect()
            except TimeoutError:
                conn.close()
                raise httpx.ConnectTimeout("timed out connecting") from None
            except OSError as exc:  # ssl.SSLError (a certificate refused) among them
                conn.close()
                raise httpx.ConnectError(type(exc).__name__) from None
        else:
            conn.sock.settimeout(timeout)
        return conn


def _readable(sock: socket.socket) -> bool:
    # poll, not select: select refuses a descriptor past FD_SETSIZE (1024), which a busy
    # service process reaches. (Windows has no poll, and no such limit on one socket.)
    if not hasattr(select, "poll"):
        return bool(select.select([sock], [], [], 0)[0])
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _send(conn: http.client.HTTPConnection, method: str, url: httpx.URL,
          headers: Mapping[str, str]) -> None:
    try:
        conn.putrequest(method, url.raw_path.decode("ascii"), skip_host="host" in headers,
                        skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
    except TimeoutError:
        raise httpx.WriteTimeout("timed out sending") from None
    except OSError as exc:
        raise httpx.WriteError(type(exc).__name__) from None
    except (http.client.HTTPException, ValueError) as exc:
        # A header value http.client refuses (a line break, a character outside Latin-1):
        # what httpx calls a local protocol error, a failed read and never a traceback.
        raise httpx.LocalProtocolError(type(exc).__name__) from None


def _receive(conn: http.client.HTTPConnection) -> http.client.HTTPResponse:
    try:
        return conn.getresponse()
    except TimeoutError:
        raise httpx.ReadTimeout("timed out waiting for the answer") from None
    except http.client.HTTPException as exc:  # a dropped connection, a garbled status line
        raise httpx.RemoteProtocolError(type(exc).__name__) from None
    except OSError as exc:
        raise httpx.ReadError(type(exc).__name__) from None


def _decoders(encodings: str) -> list[_Decoder]:
    # As httpx: each coding named, in order; codings it cannot decode are passed through.
    decoders: list[_Decoder] = []
    for coding in (part.strip().lower() for part in encodings.split(",")):
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


def _decode(decoders: list[_Decoder], chunk: bytes, end: bool = False) -> Iterator[bytes]:
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
            yield from _decode(rest, piece)
            piece = first.decompress(first.unconsumed_tail, CHUNK)
        if end:
            yield from _decode(rest, first.flush(), end=True)
    except zlib.error as exc:
        raise httpx.DecodingError(f"undecodable body: {exc}") from None
