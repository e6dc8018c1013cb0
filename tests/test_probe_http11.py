"""The probes' one lean HTTP/1.1 client (probes/http11.py, `LeanClient` on the probe loop),
on the wire: bodies framed every way HTTP/1.1 frames them, decoded, capped while read;
keep-alive only after an answer read to its end; timeouts; HTTPS verified; redirects never
followed; the URL and headers httpx would have sent; when httpx is used instead (an injected
transport, a proxy); and a blocking `probe` reading over that same client, on the shared probe
loop."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import ssl
import subprocess
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from probes.base import ProbeTarget
from probes.http11 import LeanClient
from probes.http_json import http_json
from probes.loop import ProbeLoop, wait_for
from probes.transport import Clients, FetchError, Reply, RetryPolicy, _tls, aget, get
from reconciler.core.domain import Authority, Observation, Receipt
from reconciler.testing.patience import PATIENCE_S

FAST = RetryPolicy(tries=2, backoff_s=0, timeout_s=0.5, deadline_s=2, max_bytes=1000)

#: What the server answers to one request head: the bytes to send, and whether to close after.
Responder = Callable[[bytes], tuple[bytes, bool]]


def respond(status: str, body: bytes, *headers: str, close: bool = False) -> Responder:
    head = "\r\n".join([f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers])
    return lambda request: ((head + "\r\n\r\n").encode() + body, close)


class Server:
    """A loopback HTTP/1.1 server answering each request with the next of `answers` (the last
    one again when they run out); it notes the request heads and counts the connections."""

    def __init__(self, answers: list[Responder], tls: ssl.SSLContext | None = None) -> None:
        self.answers, self.tls = answers, tls
        self.heads: list[bytes] = []
        self.connections = 0
        #: Set each time the server has closed a connection.
        self.closed = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._sock.getsockname()[1]}"

    def close(self) -> None:
        self._sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls:
                conn = self.tls.wrap_socket(conn, server_side=True)
            conn.settimeout(PATIENCE_S)
            buffered = b""
            while True:
                while b"\r\n\r\n" not in buffered:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    buffered += chunk
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                self.heads.append(head)
                answer = self.answers[min(len(self.heads), len(self.answers)) - 1]
                data, close = answer(head)
                conn.sendall(data)
                if close:
                    return
        except (OSError, ssl.SSLError):
            return
        finally:
            conn.close()
            self.closed.set()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(*answers: Responder, tls: ssl.SSLContext | None = None) -> Server:
        started.append(Server(list(answers), tls))
        return started[-1]

    yield start
    for server in started:
        server.close()


class Wire:
    """The lean client, on a probe loop of its own, as the sweep runs it."""

    def __init__(self) -> None:
        self.loop = ProbeLoop()

    def connection(self, tls: ssl.SSLContext | None = None,
                   headers: dict[str, str] | None = None) -> LeanClient:
        return LeanClient(headers or {}, tls or _tls())

    def get(self, session: LeanClient | httpx.Client, url: str,
            policy: RetryPolicy = FAST, params: dict[str, str] | None = None,
            headers: dict[str, str] | None = None) -> Reply:
        clock = lambda: datetime.now(UTC)  # noqa: E731
        if isinstance(session, httpx.Client):
            return get(session, url, params or {}, policy, clock, headers=headers)
        return self.loop.submit(aget(session, url, params or {}, policy, clock,
                                     headers=headers)).result(PATIENCE_S)

    def fetch(self, session: LeanClient | httpx.Client, url: str,
              policy: RetryPolicy = FAST) -> tuple[int, bytes]:
        reply = self.get(session, url, policy)
        return reply.status, reply.content


@pytest.fixture
def wire() -> Iterator[Wire]:
    made = Wire()
    yield made
    made.loop.close()


def test_content_length_chunked_and_read_to_close_bodies(
        serve: Callable[..., Server], wire: Wire) -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n")
    to_close = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"
    server = serve(respond("200 OK", b"framed"), lambda r: (chunked, False),
                   lambda r: (to_close, True), respond("200 OK", b"again"))
    session = wire.connection()
    assert wire.fetch(session, server.url) == (200, b"framed")
    assert wire.fetch(session, server.url) == (200, b"hello, world")
    assert wire.fetch(session, server.url) == (200, b"until the end")
    assert wire.fetch(session, server.url) == (200, b"again")
    # Kept alive through the framed answers; a new connection after the server closed one.
    assert server.connections == 2


def test_gzip_and_deflate_are_decoded(serve: Callable[..., Server], wire: Wire) -> None:
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw = raw_deflate.compress(b"raw deflate") + raw_deflate.flush()
    server = serve(respond("200 OK", gzip.compress(b"gzipped"), "Content-Encoding: gzip"),
                   respond("200 OK", zlib.compress(b"zlib deflate"), "Content-Encoding: deflate"),
                   respond("200 OK", raw, "Content-Encoding: deflate"),
                   respond("200 OK", b"\x1f\x8bnot gzip", "Content-Encoding: gzip"))
    session = wire.connection()
    assert wire.fetch(session, server.url)[1] == b"gzipped"
    assert wire.fetch(session, server.url)[1] == b"zlib deflate"
    assert wire.fetch(session, server.url)[1] == b"raw deflate"
    with pytest.raises(FetchError, match="request failed: DecodingError"):
        wire.fetch(session, server.url)


def test_the_size_cap_holds_while_reading_and_on_what_a_body_expands_to(
        serve: Callable[..., Server], wire: Wire) -> None:
    bomb = gzip.compress(b"[" * 5_000_000)
    assert len(bomb) < FAST.max_bytes * 10
    server = serve(respond("200 OK", b"x" * 5000),
                   respond("200 OK", bomb, "Content-Encoding: gzip"), respond("200 OK", b"small"))
    session = wire.connection()
    with pytest.raises(FetchError, match="larger than 1000 bytes"):
        wire.fetch(session, server.url)
    with pytest.raises(FetchError, match="larger than 1000 bytes"):
        wire.fetch(session, server.url)
    # The unread rest of each answer went with its connection: the next GET opened a new one.
    assert wire.fetch(session, server.url) == (200, b"small")
    assert server.connections == 3


def test_an_answer_not_read_to_its_end_is_never_followed_on_its_connection(
        serve: Callable[..., Server], wire: Wire) -> None:
    server = serve(respond("503 Service Unavailable", b"busy" * 100), respond("200 OK", b"ok"))
    session = wire.connection()
    # The 503 is retried without reading its body: the retry goes on a new connection.
    assert wire.fetch(session, server.url) == (200, b"ok")
    assert len(server.heads) == 2 and server.connections == 2


def test_a_connection_the_server_closed_while_idle_is_not_reused(
        serve: Callable[..., Server], wire: Wire) -> None:
    server = serve(respond("200 OK", b"one", close=True), respond("200 OK", b"two"))
    session = wire.connection()
    assert wire.fetch(session, server.url) == (200, b"one")
    # Once the server has closed it (a request sent while it closes fails as ReadError: a try
    # spent, and the retry reconnects), the next GET opens another at once, in one try.
    assert server.closed.wait(PATIENCE_S)
    assert wire.fetch(session, server.url, RetryPolicy(tries=1, timeout_s=1)) == (200, b"two")
    assert server.connections == 2


def test_a_body_cut_short_of_its_length_is_transient_then_fails(
        serve: Callable[..., Server], wire: Wire) -> None:
    server = serve(lambda r: (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort", True))
    with pytest.raises(FetchError, match="RemoteProtocolError after 2 tries"):
        wire.fetch(wire.connection(), server.url)


def test_a_garbled_status_line_is_a_protocol_error(
        serve: Callable[..., Server], wire: Wire) -> None:
    server = serve(lambda r: (b"\x00\xffNOT HTTP\r\n\r\n", True))
    with pytest.raises(FetchError, match="RemoteProtocolError after 2 tries"):
        wire.fetch(wire.connection(), server.url)


def test_a_server_that_never_answers_times_out_within_the_policy(
        serve: Callable[..., Server], wire: Wire) -> None:
    release = threading.Event()
    server = serve(lambda request: (b"", release.wait(PATIENCE_S)))
    try:
        with pytest.raises(FetchError, match="ReadTimeout after 2 tries"):
            wire.fetch(wire.connection(), server.url)
    finally:
        release.set()


def test_nothing_listening_is_a_connect_error(wire: Wire) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(FetchError, match="ConnectError after 2 tries"):
        wire.fetch(wire.connection(), f"http://127.0.0.1:{port}/")


def test_a_redirect_is_the_answer_never_followed(
        serve: Callable[..., Server], wire: Wire) -> None:
    server = serve(respond("302 Found", b"", "Location: http://elsewhere.invalid/"))
    assert wire.fetch(wire.connection(), server.url) == (302, b"")
    assert len(server.heads) == 1


def test_the_url_and_headers_are_those_httpx_would_send(
        serve: Callable[..., Server], wire: Wire) -> None:
    server = serve(respond("200 OK", b"{}"))
    url = server.url + "/v1/charges/search?expand=data"
    params = {"query": "metadata['operation_id']:'op 1'", "limit": "100"}
    session = wire.connection(headers={"Authorization": "Bearer sk_test"})
    assert wire.get(session, url, params=params,
                    headers={"User-Agent": "mine"}).content == b"{}"
    line, *fields = server.heads[0].decode().split("\r\n")
    sent = {name.lower(): value for name, value in (f.split(": ", 1) for f in fields)}
    expected = httpx.Client().build_request("GET", url, params=params)
    assert line == f"GET {expected.url.raw_path.decode()} HTTP/1.1"
    assert sent == {"host": expected.headers["host"], "accept": "*/*",
                    "accept-encoding": "gzip, deflate", "connection": "keep-alive",
                    "user-agent": "mine", "authorization": "Bearer sk_test"}


def test_repeated_answer_headers_are_joined_as_httpx_joins_them(
        serve: Callable[..., Server], wire: Wire) -> None:
    server = serve(respond("200 OK", b"", "Link: <a>; rel=\"prev\"", "Link: <b>; rel=\"next\""))
    reply = wire.get(wire.connection(), server.url)
    assert reply.headers["link"] == '<a>; rel="prev", <b>; rel="next"'


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_https_verifies_the_certificate(tmp_path: Path, serve: Callable[..., Server],
                                       wire: Wire) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    server = serve(respond("200 OK", b"secure"), tls=tls)
    assert server.url.startswith("https://")
    trusting = ssl.create_default_context(cafile=str(cert))
    assert wire.fetch(wire.connection(trusting), server.url) == (200, b"secure")
    # The probes' own context (the CA bundle) does not know this certificate.
    with pytest.raises(FetchError, match="ConnectError after 2 tries"):
        wire.fetch(wire.connection(), server.url)


def test_httpx_is_used_for_an_injected_transport_or_a_proxy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert Clients({}, None).lean
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    assert not Clients({}, mock).lean
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert not Clients({}, None).lean
    with Clients({}, mock).client() as injected:
        assert isinstance(injected, httpx.Client)


def test_a_header_value_with_a_line_break_is_a_failed_read_never_sent(
        serve: Callable[..., Server], wire: Wire) -> None:
    server = serve(respond("200 OK", b"{}"))
    with pytest.raises(FetchError, match="request failed: LocalProtocolError"):
        wire.get(wire.connection(), server.url, headers={"X-Note": "one\r\nInjected: yes"})
    assert server.heads == []


def test_a_blocking_probe_reads_over_the_same_wire_as_aprobe(
        serve: Callable[..., Server]) -> None:
    record = json.dumps({"key": "key-1", "charge_id": "ch_1", "request_hash": "sha256:ab"})
    missing = json.dumps({"error": {"code": "resource_missing"}})
    server = serve(respond("200 OK", record.encode()), respond("404 Not Found", missing.encode()),
                   respond("200 OK", record.encode()), respond("404 Not Found", missing.encode()))
    lookup = http_json("keys", {"base_url": server.url, "path": "/keys/{idempotency_key}",
                                "item": "", "ref": "charge_id", "hash": "request_hash",
                                "emit": "receipt", "where": {"key": "{idempotency_key}"},
                                "not_found": "zero",
                                "not_found_where": {"error.code": "resource_missing"},
                                "authority": "authoritative"}, {})
    found = ProbeTarget("op-1", "key-1", "pay", "charge", "sha256:ab")
    loop = ProbeLoop()
    try:
        answers = [lookup.probe(found), lookup.probe(found),
                   loop.submit(lookup.aprobe(found)).result(PATIENCE_S),
                   loop.submit(lookup.aprobe(found)).result(PATIENCE_S)]
    finally:
        loop.close()
    receipt, zero = answers[0], answers[1]
    assert isinstance(receipt, Receipt) and receipt.provider_ref == "ch_1"
    assert isinstance(zero, Observation) and zero.authority is Authority.AUTHORITATIVE
    assert [replace(a, at=receipt.at) for a in answers[2:]] == [
        receipt, replace(zero, at=receipt.at)]
    assert [head.split(b"\r\n")[0] for head in server.heads] == [b"GET /keys/key-1 HTTP/1.1"] * 4


def test_a_blocking_wait_on_the_probe_loop_itself_is_refused() -> None:
    async def nothing() -> int:
        return 1

    async def on_the_loop() -> int:
        return wait_for(nothing())

    assert wait_for(nothing()) == 1  # from any other thread: run and waited for
    with pytest.raises(RuntimeError, match="on the probe loop itself"):
        wait_for(on_the_loop())
