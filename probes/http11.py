"""A lean HTTP/1.1 GET for probes: blocking sockets, one keep-alive connection per origin, each
answer parsed by httptools (llhttp, the C parser uvicorn and Node.js use), under the retries and
bounds of `probes/transport.py`.

Why not httpx here, nor `http.client`: with 64 probe calls in flight on threads (the reconcile
benchmark's setup), a read through `httpx.Client` over its default transport (httpcore and h11,
pure Python) took 0.76-0.99 ms of CPU, and `http.client` 0.13-0.17 ms, much of it parsing the
answer's head with the `email` package. One GET read to its end, one after another on one
thread, three alternating rounds on one machine: `http.client` 180-198 us of CPU, this client
106-115 us (under `transport.get`'s retries: 217-277 us against 147-181). Below `transport.get`,
the framework's one seam to the wire, this stands in for `httpx.Client(follow_redirects=False,
verify=<the same SSL context>)` and does what it did:

- the same URL: `httpx.URL` builds and checks it (params, when given, make the query, as in
  `httpx.Request`; percent-encoded as httpx does; a malformed URL raises `httpx.InvalidURL`);
- the same request headers: Host (`url.netloc`, as httpx sends it), and httpx's defaults
  (Accept, Accept-Encoding: gzip, deflate, Connection: keep-alive, User-Agent), the caller's on
  top: a provider sees one client whichever path a probe takes; a header name that is not a
  token, or a value with a line break or NUL, is never sent (`httpx.LocalProtocolError`);
- no redirect followed: a 3xx is the answer;
- HTTPS through the given SSL context: certificate verification and the hostname check;
- the timeout on the connect and on every socket read and write;
- Content-Length, chunked and read-to-close bodies (llhttp frames them; a body cut short is
  `httpx.RemoteProtocolError`, as is an answer's head past `MAX_HEAD` bytes or `MAX_HEADERS`
  fields, the limits `http.client` kept), interim 1xx answers skipped, gzip and deflate
  decoded (`probes/decoding.py`) in pieces of at most 64 KiB, so the caller's size cap holds
  on what a small compressed body expands to;
- errors raised as httpx's own exception classes (`ConnectTimeout`, `ReadTimeout`,
  `ConnectError`, `ReadError`, `RemoteProtocolError`, `DecodingError`...), so `transport.get`
  maps both paths to `_Transient` or `FetchError` the one way;
- a connection reused only after its answer was read to the end, unless the server said it
  would close it (`should_keep_alive`, which knows HTTP/1.0 from 1.1) or sent bytes past the
  answer, and dropped before reuse when the server has closed its end while it was idle (a
  readable idle socket: httpcore checks the same before it reuses a connection).

What it does not do: methods other than GET, proxies (`transport.Clients` uses httpx whenever
the environment names one), cookies (none kept, none sent: a probe call starts without any
anyway), HTTP/2, brotli or zstd (never asked for).

Sources relied on: httptools 0.6's README and parser.pyx (the callbacks; `should_keep_alive`
read in `on_message_complete`, as llhttp's docs ask; a body that ends at the close never
completes a message, hence the check at EOF here), RFC 9112 sections 6.3 (how a response's body
is framed) and 5.5 (field values), CPython 3.11's Lib/http/client.py (the head limits, Host
header and TCP_NODELAY this replaces), httpx 0.28's `_client.py` and `_models.py` (default
headers, the query from params, Host from `url.netloc`) and `_decoders.py` (unknown content
codings are passed through, deflate may come raw or zlib-wrapped).
"""

from __future__ import annotations

import re
import select
import socket
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import httptools
import httpx

from probes.decoding import decode, decoders_for

#: The most bytes one read hands back.
CHUNK = 64 * 1024
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


class Parsed:
    """One answer as httptools parses it, fed the bytes a connection reads (sans I/O, so the
    blocking client here and the asyncio one, `probes/http11_async.py`, share it):
    `status_code`, `headers` (lower-case names, repeated ones joined by ", " as
    `httpx.Headers.get` joins them) once `head_done`, body pieces through `take_body` until
    `complete`. It is httptools' protocol object: the parser calls the `on_*` methods."""

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


class Response:
    """One answer read off a blocking socket: `status_code`, `headers` (as `Parsed`'s) and
    the body through `iter_bytes`, decoded."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._parsed = parsed = Parsed()
        self._read_out = False
        while not parsed.head_done:
            self._feed()
        self.status_code = parsed.status_code
        self.headers = parsed.headers

    @property
    def reusable(self) -> bool:
        """Whether the connection may carry the next GET: this answer read to its end by the
        caller (`iter_bytes` run out), the server keeping the connection open, nothing sent
        past the answer."""
        return self._read_out and self._parsed.keep_alive and not self._parsed.overrun

    def close(self) -> None:
        self._sock.close()

    def iter_bytes(self) -> Iterator[bytes]:
        decoders = decoders_for(self.headers)
        parsed = self._parsed
        while True:
            for chunk in parsed.take_body():
                yield from decode(decoders, chunk)
            if parsed.complete:
                break
            self._feed()
        yield from decode(decoders, b"", end=True)
        self._read_out = True

    def _feed(self) -> None:
        try:
            data = self._sock.recv(CHUNK)
        except TimeoutError:
            raise httpx.ReadTimeout("timed out reading the answer") from None
        except OSError as exc:
            raise httpx.ReadError(type(exc).__name__) from None
        self._parsed.feed(data)


class Connection:
    """GETs to one origin after another (per scheme, host and port, one connection each), with
    `headers` on every request; used by one call at a time, like the httpx.Client it replaces."""

    def __init__(self, headers: Mapping[str, str], tls: ssl.SSLContext) -> None:
        self._headers = {**DEFAULT_HEADERS, **{k.lower(): v for k, v in headers.items()}}
        self._tls = tls
        self._open: dict[tuple[str, str, int], socket.socket] = {}

    @contextmanager
    def stream(self, method: str, url: str, *, params: Mapping[str, str] | None = None,
               headers: Mapping[str, str] | None = None,
               timeout: float) -> Iterator[Response]:
        """Send `method url` and yield the answer, its body not yet read; the connection is
        kept for the next request only when the body was read to the end."""
        if method != "GET":
            raise ValueError(f"probes send GETs only, not {method}")
        target = httpx.URL(url) if params is None else httpx.URL(url, params=params)
        head = request_head(target, self._headers if not headers else {
            **self._headers, **{k.lower(): v for k, v in headers.items()}})
        origin, sock = self._connection(target, timeout)
        response = None
        try:
            _send(sock, head)
            response = Response(sock)
            yield response
        finally:
            if response is None or not response.reusable:
                del self._open[origin]
                sock.close()

    def close(self) -> None:
        for sock in self._open.values():
            sock.close()
        self._open.clear()

    def _connection(self, url: httpx.URL,
                    timeout: float) -> tuple[tuple[str, str, int], socket.socket]:
        origin = origin_of(url)
        _, host, port = origin
        sock = self._open.get(origin)
        if sock is not None and _readable(sock):
            del self._open[origin]
            sock.close()  # idle yet readable: the server closed it (or broke the protocol)
            sock = None
        if sock is None:
            sock = self._open[origin] = _connect(host, port, timeout,
                                                 self._tls if url.scheme == "https" else None)
        else:
            sock.settimeout(timeout)
        return origin, sock


def origin_of(url: httpx.URL) -> tuple[str, str, int]:
    """Where `url` connects: scheme, host (IDNA-encoded, as httpx connects and sends it), port."""
    if url.scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"unsupported scheme {url.scheme!r}")
    return (url.scheme, url.raw_host.decode("ascii"),
            url.port or (443 if url.scheme == "https" else 80))


def _connect(host: str, port: int, timeout: float, tls: ssl.SSLContext | None) -> socket.socket:
    try:
        sock = socket.create_connection((host, port), timeout)
    except TimeoutError:
        raise httpx.ConnectTimeout("timed out connecting") from None
    except OSError as exc:
        raise httpx.ConnectError(type(exc).__name__) from None
    try:
        # As http.client: a request goes out in one segment, without waiting on Nagle.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
    except TimeoutError:
        sock.close()
        raise httpx.ConnectTimeout("timed out in the TLS handshake") from None
    except OSError as exc:  # ssl.SSLError (a certificate refused) among them
        sock.close()
        raise httpx.ConnectError(type(exc).__name__) from None


def _readable(sock: socket.socket) -> bool:
    # poll, not select: select refuses a descriptor past FD_SETSIZE (1024), which a busy
    # service process reaches. (Windows has no poll, and no such limit on one socket.)
    if not hasattr(select, "poll"):
        return bool(select.select([sock], [], [], 0)[0])
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


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


def _send(sock: socket.socket, head: bytes) -> None:
    try:
        sock.sendall(head)
    except TimeoutError:
        raise httpx.WriteTimeout("timed out sending") from None
    except OSError as exc:
        raise httpx.WriteError(type(exc).__name__) from None


def _chunked(codings: str) -> bool:
    # RFC 9112 6.3: a response's body is chunked when chunked is its last transfer coding.
    return codings.rsplit(",", 1)[-1].strip().lower() == "chunked"
