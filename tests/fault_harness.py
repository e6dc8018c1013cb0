"""The fault harness's moving parts (tests/test_faults_*.py): a load of intent writes over HTTP
that keeps every answer, a TCP relay that can cut a database off and bring it back, and the
checks that nothing in a store is half-written.

`--fault-scale N` (tests/conftest.py) makes every loop of the harness N times longer.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from types import TracebackType

import httpx
import pytest
import sqlalchemy

# Every wait in the harness ends by this deadline, whatever the machine's load.
from reconciler.testing.patience import PATIENCE_S as PATIENCE_S

HASH = "sha256:" + "ab" * 32
PROBLEM_JSON = "application/problem+json"


def scaled(config: pytest.Config, n: int) -> int:
    """`n` times the `--fault-scale` given on the command line (1 by default)."""
    return n * int(config.getoption("--fault-scale"))


def eventually(check: Callable[[], bool], timeout_s: float = PATIENCE_S) -> bool:
    """Poll `check` until it holds (True) or `timeout_s` has passed (False)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def intent_body(operation_id: str) -> dict[str, str]:
    return {"operation_id": operation_id, "request_hash": HASH, "idempotency_key": operation_id,
            "provider": "pay", "action": "charge", "effect": "non_idempotent"}


@dataclass(frozen=True, slots=True)
class WriteResult:
    """One write and what came back: `status` None when no answer did (the server was gone)."""

    operation_id: str
    status: int | None
    content_type: str = ""
    problem_type: str = ""


class IntentLoad:
    """`writers` threads recording new intents over HTTP as fast as the sidecar answers, at most
    `per_writer` each, until `stop()`. Every answer is kept, in order per writer."""

    def __init__(self, url: str, *, prefix: str, writers: int = 3,
                 per_writer: int = 2_000) -> None:
        self.url = url
        self.prefix = prefix
        self.per_writer = per_writer
        self.answers: list[WriteResult] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._write, args=(n,), daemon=True)
                         for n in range(writers)]

    def __enter__(self) -> IntentLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(PATIENCE_S)

    def _write(self, writer: int) -> None:
        with httpx.Client(base_url=self.url, timeout=PATIENCE_S) as http:
            for n in range(self.per_writer):
                if self._stop.is_set():
                    return
                op = f"{self.prefix}-{writer}-{n}"
                try:
                    response = http.post("/v1/operations", json=intent_body(op))
                except httpx.TransportError:
                    self._keep(WriteResult(op, None))
                    time.sleep(0.01)  # the server is gone: do not spin
                    continue
                kind = response.headers.get("content-type", "")
                problem = response.json().get("type", "") if kind == PROBLEM_JSON else ""
                self._keep(WriteResult(op, response.status_code, kind, problem))

    def _keep(self, answer: WriteResult) -> None:
        with self._lock:
            self.answers.append(answer)

    def snapshot(self) -> list[WriteResult]:
        with self._lock:
            return list(self.answers)

    @property
    def acknowledged(self) -> list[str]:
        """The operations the sidecar said it recorded (a 2xx answer)."""
        return [a.operation_id for a in self.snapshot()
                if a.status is not None and 200 <= a.status < 300]

    def count(self, status: int | None) -> int:
        return sum(a.status == status for a in self.snapshot())

    def await_acks(self, more: int) -> bool:
        """Wait for `more` acknowledgements than now; False if they do not come in time."""
        wanted = len(self.acknowledged) + more
        return eventually(lambda: len(self.acknowledged) >= wanted)

    def await_answers(self, status: int | None, more: int) -> bool:
        """Wait for `more` answers with `status` than now (None: no answer at all)."""
        wanted = self.count(status) + more
        return eventually(lambda: self.count(status) >= wanted)


# --- a database that goes away and comes back -----------------------------------------------


class TcpRelay:
    """A TCP relay on 127.0.0.1 (a port the OS picks) to `upstream`. `cut()` drops every
    connection through it and resets new ones, as a stopped server would; `restore()` relays
    again."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._acceptor = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> TcpRelay:
        self._acceptor.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._closed.set()
        self._acceptor.join(PATIENCE_S)
        self._drop_all()
        self._listener.close()

    def cut(self) -> None:
        self._cut.set()
        self._drop_all()

    def restore(self) -> None:
        self._cut.clear()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            if self._cut.is_set():
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._open.update((client, server))
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for sock in (src, dst):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _drop_all(self) -> None:
        with self._lock:
            dropped, self._open = self._open, set()
        for sock in dropped:
            _reset(sock)


def _reset(sock: socket.socket) -> None:
    """Close with a RST, as a dead peer's kernel answers: no orderly goodbye."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    # A close alone would not reach a pump thread blocked in recv() on this socket: the
    # connection would live on, half dead. The shutdown wakes it.
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


# --- what a store must look like after any fault ----------------------------------------------

#: Rows that cannot exist in a store where every transaction was all or nothing.
HALF_WRITTEN = {
    "intent_without_state": "SELECT count(*) FROM intents i LEFT JOIN operation_state s "
                            "ON s.operation_id = i.operation_id WHERE s.operation_id IS NULL",
    "state_without_intent": "SELECT count(*) FROM operation_state s LEFT JOIN intents i "
                            "ON i.operation_id = s.operation_id WHERE i.operation_id IS NULL",
    "attempt_without_intent": "SELECT count(*) FROM attempts a LEFT JOIN intents i "
                              "ON i.operation_id = a.operation_id WHERE i.operation_id IS NULL",
    "evidence_without_intent": "SELECT count(*) FROM evidence e LEFT JOIN intents i "
                               "ON i.operation_id = e.operation_id WHERE i.operation_id IS NULL",
}


@contextmanager
def inspected(url: str) -> Iterator[sqlalchemy.Connection]:
    """A plain connection to the store at `url`, outside any sidecar."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


#: What `half_written` finds in a whole store.
WHOLE = dict.fromkeys(HALF_WRITTEN, 0)


def half_written(url: str) -> dict[str, int]:
    """Each kind of half-written row and how many the store holds (all 0 when whole)."""
    with inspected(url) as conn:
        return {name: conn.exec_driver_sql(query).scalar_one()
                for name, query in HALF_WRITTEN.items()}


def recorded_ids(url: str) -> set[str]:
    with inspected(url) as conn:
        return set(conn.exec_driver_sql("SELECT operation_id FROM intents").scalars())


def sqlite_checks(url: str) -> tuple[list[str], list[tuple[object, ...]]]:
    """SQLite's own verdict on the file: integrity_check rows and foreign_key_check rows."""
    with inspected(url) as conn:
        integrity = list(conn.exec_driver_sql("PRAGMA integrity_check").scalars())
        foreign = [tuple(row) for row in conn.exec_driver_sql("PRAGMA foreign_key_check")]
    return integrity, foreign

