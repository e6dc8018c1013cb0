"""A provider whose read API misbehaves on the wire, probed through the sweeper as the service
does it: hangs, resets, truncated, garbled or slow answers, and zeros served under an error
status, one round or any sequence of rounds. None of it may become a verified verdict or open a
retry; a spent probe budget escalates. And a lagging zero asked inside the visibility window
stays inconclusive even when its answer arrives after the window.

The provider is a raw socket server on loopback, so that it can fail below HTTP as well as in
it; the probe is the declarative `http_json`, authoritative, so that any zero it wrongly
believed would verify at once. (Faults at the level of a probe object are in test_sweep.py,
shapes of answers over a mock transport in test_probe_http_json.py, the sandbox's unavailable
and cached reads in test_probe_integration.py.)
"""

from __future__ import annotations

import gzip
import socket
import socketserver
import struct
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probes.http_json import http_json
from reconciler.core.domain import (
    Attempt,
    Authority,
    Carried,
    Effect,
    Intent,
    Observation,
    Outcome,
    ProviderContract,
    Verdict,
)
from reconciler.core.schedule import SweepPolicy
from reconciler.core.sight import Sight
from reconciler.ledger import Judgement, Ledger
from reconciler.ledger.sweep import Sweeper
from reconciler.store.leases import SqlLeases
from reconciler.store.schema import open_store
from reconciler.testing import ManualClock

from builders import H0, K0
from fault_harness import PATIENCE_S, scaled

pytestmark = pytest.mark.slow

ZERO = b'{"data": []}'
#: The probe's bounds: each try, all tries, and the sweeper's cut-off above both.
TIMEOUT_S, DEADLINE_S, SWEEP_TIMEOUT_S = 0.3, 0.6, 5.0


Fault = Callable[[socket.socket, threading.Event], object]


def _head(status: str, length: int, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {length}", "Connection: close", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer(status: str, body: bytes, *headers: str) -> bytes:
    return _head(status, len(body), *headers) + body


def _send(data: bytes) -> Fault:
    return lambda conn, release: conn.sendall(data)


def _hang(conn: socket.socket, release: threading.Event) -> None:
    release.wait(PATIENCE_S)


def _hang_after_headers(conn: socket.socket, release: threading.Event) -> None:
    conn.sendall(_head("200 OK", len(ZERO)))
    release.wait(PATIENCE_S)


def _reset(conn: socket.socket, release: threading.Event) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _close(conn: socket.socket, release: threading.Event) -> None:
    """Return without a word: the server closes the connection."""


def _slow_zero(conn: socket.socket, release: threading.Event) -> None:
    # An honest zero, but later than the probe waits: it must not count when it comes.
    if not release.wait(TIMEOUT_S * 2):
        conn.sendall(_answer("200 OK", ZERO))


def _trickled_zero(conn: socket.socket, release: threading.Event) -> None:
    # Each byte within the read timeout, the whole past the probe's deadline.
    conn.sendall(_head("200 OK", len(ZERO)))
    for byte in ZERO:
        if release.wait(DEADLINE_S / 4):
            return
        conn.sendall(bytes([byte]))


#: Each fault: what the provider does once it has read a request.
FAULTS: dict[str, Fault] = {
    "hang": _hang,
    "hang_after_headers": _hang_after_headers,
    "reset": _reset,
    "close": _close,
    "truncated": _send(_answer("200 OK", ZERO)[:-4]),
    "garbage_status_line": _send(b"\x00\xffNOT HTTP AT ALL\r\n\r\n" + ZERO),
    "not_json": _send(_answer("200 OK", b"<html>down for maintenance</html>",
                              "Content-Type: text/html")),
    "wrong_shape": _send(_answer("200 OK", b'{"data": {"id": "ch_1"}}')),
    "no_content": _send(_answer("204 No Content", b"")),
    "bad_gzip": _send(_answer("200 OK", b"\x1f\x8bnot gzip at all", "Content-Encoding: gzip")),
    "gzip_bomb": _send(_answer("200 OK", gzip.compress(b"[" * 3_000_000),
                               "Content-Encoding: gzip")),
    "zero_under_500": _send(_answer("500 Internal Server Error", ZERO)),
    "zero_under_503": _send(_answer("503 Service Unavailable", ZERO)),
    "zero_under_302": _send(_answer("302 Found", ZERO, "Location: /elsewhere")),
    "zero_under_404": _send(_answer("404 Not Found", ZERO)),
    "slow_zero": _slow_zero,
    "trickled_zero": _trickled_zero,
}


class FaultyProvider(socketserver.ThreadingTCPServer):
    """Reads each request's head, then does what `fault` says (a name in FAULTS, or "zero" for
    an honest empty answer after calling `before_zero`)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fault = "zero"
        self.before_zero: Callable[[], None] = lambda: None
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(socketserver.BaseRequestHandler):
    server: FaultyProvider

    def handle(self) -> None:
        conn: socket.socket = self.request
        conn.settimeout(PATIENCE_S)
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                return
            head += chunk
        if self.server.fault == "zero":
            self.server.before_zero()
            conn.sendall(_answer("200 OK", ZERO))
        else:
            FAULTS[self.server.fault](conn, self.server.release)


@pytest.fixture(scope="module")
def provider() -> Iterator[FaultyProvider]:
    server = FaultyProvider()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()  # hanging handlers let go
        server.shutdown()
        server.server_close()
        thread.join(PATIENCE_S)


class Reads:
    """A ledger on a fresh store and a sweeper whose one probe reads `provider`."""

    def __init__(self, store_url: str, provider: FaultyProvider, *, authority: str,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 budget: int = 20) -> None:
        self.store = open_store(store_url)
        # Its provider settles at once: the faults here are the reads', not the dispatch's.
        self.store.put_contract(ProviderContract("pay", idempotency_keys=True,
                                                 visibility_lag_s=10, max_attempts=3,
                                                 inflight_s=0))
        self.ledger = Ledger(self.store, clock)
        probe = http_json("search", {
            "base_url": provider.url, "path": "/v1/charges", "items": "data", "ref": "id",
            "where": {"metadata.operation_id": "{operation_id}"}, "authority": authority,
            "tries": 2, "backoff_s": 0, "timeout_s": TIMEOUT_S, "deadline_s": DEADLINE_S},
            {}, clock=clock)
        # It reads charges by the operation id the request carried in their metadata.
        probe.sight = Sight(frozenset({"charge"}), frozenset({Carried.OPERATION_ID}))
        self.sweeper = Sweeper(self.ledger, SqlLeases(self.store), lambda provider: [probe],
                               SweepPolicy(probe_timeout_s=SWEEP_TIMEOUT_S, probe_budget=budget))

    def dispatched(self, op: str) -> str:
        """An operation whose only dispatch timed out: nothing is known until a probe says."""
        now = self.ledger.clock()
        self.ledger.record_intent(Intent(op, H0, K0, "pay", "charge", Effect.NON_IDEMPOTENT,
                                         now, carries=frozenset({Carried.OPERATION_ID})))
        self.ledger.record_attempt(Attempt(op, 1, K0, H0, now, Outcome.TIMEOUT))
        return op

    def round(self, op: str) -> Judgement:
        judgement = self.sweeper.reconcile(op)
        assert judgement is not None  # nobody else holds the lease
        return judgement

    def close(self) -> None:
        self.store.engine.dispose()


@pytest.fixture
def reads(tmp_path: Path, provider: FaultyProvider) -> Iterator[Reads]:
    opened = Reads(f"sqlite:///{tmp_path / 'r.db'}", provider, authority="authoritative")
    yield opened
    opened.close()


VERIFIED = {Verdict.VERIFIED_APPLIED, Verdict.VERIFIED_NOT_APPLIED}


def assert_no_evidence(judgement: Judgement) -> None:
    latest = judgement.facts.of(Observation)[-1]
    assert latest.authority is Authority.UNAVAILABLE and latest.matches == ()
    assert judgement.decision.verdict not in VERIFIED
    assert not judgement.decision.retry_allowed


def test_an_honest_zero_verifies_at_once(reads: Reads, provider: FaultyProvider) -> None:
    # The control: the probe is strict enough that any zero it believed would verify.
    provider.fault = "zero"
    assert reads.round(reads.dispatched("op-honest")).decision.verdict is (
        Verdict.VERIFIED_NOT_APPLIED)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_misbehaving_read_is_unavailable_evidence_and_no_verdict(
        reads: Reads, provider: FaultyProvider, fault: str) -> None:
    provider.fault = fault
    judgement = reads.round(reads.dispatched(f"op-{fault}"))
    assert_no_evidence(judgement)
    assert judgement.decision.verdict is Verdict.INDETERMINATE


def test_no_sequence_of_faults_verifies_and_the_budget_escalates(
        tmp_path: Path, provider: FaultyProvider, pytestconfig: pytest.Config) -> None:
    store_url = f"sqlite:///{tmp_path / 'r.db'}"
    examples = iter(range(1_000_000))

    @settings(max_examples=scaled(pytestconfig, 8), deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.sampled_from(sorted(FAULTS)), min_size=1, max_size=4))
    def rounds(faults: list[str]) -> None:
        reads = Reads(store_url, provider, authority="authoritative", budget=len(faults))
        try:
            op = reads.dispatched(f"op-{next(examples)}")
            for fault in faults:
                provider.fault = fault
                judgement = reads.round(op)
                assert_no_evidence(judgement)
            assert judgement.escalated
        finally:
            reads.close()

    rounds()


def test_a_lagging_zero_asked_inside_the_window_says_nothing_when_it_arrives_after(
        tmp_path: Path, provider: FaultyProvider) -> None:
    clock = ManualClock()
    reads = Reads(f"sqlite:///{tmp_path / 'r.db'}", provider, authority="lagging", clock=clock)
    try:
        op = reads.dispatched("op-lag")
        provider.fault = "zero"
        # The provider takes past the end of the 10 s window to answer.
        provider.before_zero = lambda: clock.advance(11)
        first = reads.round(op)
        provider.before_zero = lambda: None
        second = reads.round(op)
    finally:
        provider.before_zero = lambda: None
        reads.close()
    assert first.facts.of(Observation)[-1].at == first.facts.attempts[0].at
    assert first.decision.verdict is Verdict.INDETERMINATE
    # Asked after the window, the same zero is conclusive: the first one was not by its date.
    assert second.decision.verdict is Verdict.VERIFIED_NOT_APPLIED

