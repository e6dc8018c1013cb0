"""A service that holds under abuse (issue 12), over real sockets on loopback: an endless header,
a slow-loris, too many headers, a burst of connections, TLS, a private store file.

Every loop is bounded in count and in time; the 1 s and 10 s figures are the issue's bounds.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from probes.base import Probe
from reconciler.infra.serving import bind, in_thread
from reconciler.ledger import Ledger
from reconciler.service import Settings, create_app
from reconciler.service.server import uvicorn_config
from reconciler.store.schema import open_store

from sidecar_client import CONTRACTS, H, zero_probe

LOOPBACK = "127.0.0.1"


@contextmanager
def holding_sidecar(tmp_path: Path, probes: list[Probe] | None = None,
                    **settings: Any) -> Iterator[str]:
    """The sidecar as `serve` runs it (h11, head deadline, admission), on loopback."""
    db = f"sqlite:///{tmp_path / 'reconciler.db'}"
    store = open_store(db)
    for contract in CONTRACTS:
        store.put_contract(contract)
    full = Settings(db=db, **{"sweep_interval_s": 0, **settings})
    app = create_app(full, ledger=Ledger(store), probes_for=lambda _: probes or [])
    server = uvicorn.Server(uvicorn_config(app, full, log_level="warning"))
    sock = bind(LOOPBACK, 0)
    try:
        with in_thread(server, sock) as url:
            yield url.replace("http://", "https://") if full.tls_cert else url
    finally:
        store.engine.dispose()


def _address(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").partition(":")
    return host, int(port)


def _healthz_each_within(url: str, count: int, bound_s: float) -> list[int]:
    statuses = []
    for _ in range(count):
        statuses.append(httpx.get(url + "/healthz", timeout=bound_s).status_code)
        time.sleep(0.05)
    return statuses


def test_an_endless_header_is_cut_off_and_healthz_keeps_answering(tmp_path: Path) -> None:
    with holding_sidecar(tmp_path) as url:
        flood = socket.create_connection(_address(url), timeout=5)
        flood.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Flood: ")
        cut_off = threading.Event()

        def stream() -> None:
            # At most 4 MiB over at most 20 s: the server must close long before. A server that
            # served nothing else while it read the flood would keep /healthz waiting past the
            # 5 s each answer is allowed (generous for a loaded machine).
            deadline = time.monotonic() + 20
            try:
                for _ in range(4096):
                    if time.monotonic() > deadline:
                        return
                    flood.sendall(b"a" * 1024)
            except OSError:
                cut_off.set()

        streamer = threading.Thread(target=stream, daemon=True)
        streamer.start()
        assert _healthz_each_within(url, 10, bound_s=5.0) == [200] * 10
        streamer.join(25)
        answer = b""
        if not cut_off.is_set():
            answer = flood.recv(1024)
        flood.close()
        assert cut_off.is_set() or answer.startswith(b"HTTP/1.1 400") or answer == b""


def test_a_request_head_sent_too_slowly_is_closed(tmp_path: Path) -> None:
    with holding_sidecar(tmp_path, request_read_timeout_s=0.5) as url:
        slow = socket.create_connection(_address(url), timeout=5)
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")
        closed_after = None
        started = time.monotonic()
        for _ in range(40):  # a header byte every 0.1 s, for at most 4 s
            try:
                slow.sendall(b"X")
            except OSError:
                closed_after = time.monotonic() - started
                break
            time.sleep(0.1)
        if closed_after is None:
            slow.settimeout(2)
            assert slow.recv(1024) == b""
        slow.close()
        assert closed_after is None or closed_after < 4
        assert httpx.get(url + "/healthz", timeout=10).status_code == 200


def test_a_body_that_stops_arriving_is_408(tmp_path: Path) -> None:
    with holding_sidecar(tmp_path, request_read_timeout_s=0.4) as url:
        stalled = socket.create_connection(_address(url), timeout=5)
        stalled.sendall(b"POST /v1/operations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                        b'{"operation_id": ')
        started = time.monotonic()
        answer = stalled.recv(4096)
        waited = time.monotonic() - started
        stalled.close()
        assert answer.startswith(b"HTTP/1.1 408")
        # The deadline, and at most a tick (a quarter of it) before the timer sees it passed.
        assert 0.35 < waited < 0.4 + 0.1 + 2.0
        assert httpx.get(url + "/healthz", timeout=10).status_code == 200


def test_too_many_header_fields_is_431(tmp_path: Path) -> None:
    with holding_sidecar(tmp_path, max_headers=20) as url:
        headers = {f"x-h{i}": "1" for i in range(30)}
        response = httpx.get(url + "/v1/operations", headers=headers)
        assert response.status_code == 431
        assert response.json()["type"].endswith("/too-many-headers")


def test_a_burst_of_600_connections_gets_503s_not_a_hang(tmp_path: Path) -> None:
    operations = 20
    with holding_sidecar(tmp_path, [zero_probe(delay_s=0.5)], max_concurrency=8) as url:
        with httpx.Client(base_url=url) as http:
            for i in range(operations):
                assert http.post("/v1/operations", json={
                    "operation_id": f"op-{i}", "request_hash": H, "idempotency_key": f"k-{i}",
                    "provider": "pay", "action": "charge",
                    "effect": "non_idempotent"}).status_code == 201

        host, port = _address(url)

        async def one(i: int) -> tuple[int, dict[str, str], bytes]:
            # Plain sockets, not an HTTP client: 600 of them at once must cost the test little.
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(f"POST /v1/operations/op-{i % operations}/reconcile HTTP/1.1\r\n"
                         f"Host: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                         .encode())
            answer = await reader.read()
            writer.close()
            head, _, body = answer.partition(b"\r\n\r\n")
            status_line, *lines = head.decode().split("\r\n")
            headers = dict(line.lower().split(": ", 1) for line in lines)
            return int(status_line.split()[1]), headers, body

        async def burst() -> list[tuple[int, dict[str, str], bytes]]:
            async with asyncio.timeout(10):
                return await asyncio.gather(*(one(i) for i in range(600)))

        answers = asyncio.run(burst())
        statuses = [status for status, _, _ in answers]
        overloaded = [(headers, body) for status, headers, body in answers if status == 503]
        assert overloaded, statuses
        assert all(headers["retry-after"] == "1" and b"/overloaded" in body
                   for headers, body in overloaded)
        assert set(statuses) <= {200, 409, 503}
        assert 200 in statuses
        assert httpx.get(url + "/healthz", timeout=1).status_code == 200


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_serves_https_with_the_given_certificate(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    with holding_sidecar(tmp_path, tls_cert=cert, tls_key=key) as url:
        assert url.startswith("https://")
        trusted = ssl.create_default_context(cafile=str(cert))
        assert httpx.get(url + "/healthz", verify=trusted).status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(url.replace("https://", "http://") + "/healthz", timeout=2)


def test_a_new_sqlite_store_is_private_to_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = open_store(f"sqlite:///{path}")
    try:
        assert path.stat().st_mode & 0o777 == 0o600
    finally:
        store.engine.dispose()
