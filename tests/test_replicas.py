"""Two `reconciler serve` processes on one PostgreSQL store: the retry lease holds across them,
and they divide the reconcile sweep without probing one operation twice at the same time."""

import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from reconciler.core.hashing import request_hash
from reconciler.sandbox import running_sandbox
from reconciler.sandbox.credentials import SANDBOX_CREDENTIALS

from databases import pg_schema, pg_unreachable
from fault_harness import scaled
from service_harness import serving_process

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(pg_unreachable() is not None,
                                 reason=pg_unreachable() or "PostgreSQL reachable")]

#: Rounds of 32 concurrent retry requests, each round on an operation of its own; times
#: `--fault-scale`.
GRANT_ROUNDS = 25
PROVIDER = "pay"
BODY = {"amount": 1200, "currency": "eur"}
HASH = request_hash(BODY)


@contextmanager
def running_replicas(tmp_path: Path, probe_url: str | None = None, *,
                     retry_lease_s: float = 60.0) -> Iterator[list[str]]:
    """Two replicas on one fresh PostgreSQL schema, granting retry leases of `retry_lease_s`;
    with `probe_url`, each sweeps every 0.2 s with a weak probe reading
    `probe_url`/lookup/<operation id>. The provider settles at once (`inflight_s` 0): a zero
    read just after a dispatch is conclusive."""
    config = tmp_path / "reconciler.toml"
    probes = "" if probe_url is None else f"""
[[providers.{PROVIDER}.probes]]
use = "http_json"
name = "lookup"
actions = ["charge"]
base_url = "{probe_url}"
path = "/lookup/{{operation_id}}"
items = "matches"
ref = "ref"
authority = "weak"
"""
    config.write_text(f"""
[service]
sweep_interval_s = {0.2 if probe_url else 0}
probe_budget = 100
retry_lease_ttl_s = {retry_lease_s}

[providers.{PROVIDER}]
idempotency_keys = true
max_attempts = 3
inflight_s = 0
{probes}""")
    with pg_schema() as url, ExitStack() as stack:
        env = {"RECONCILER_DB": url, "RECONCILER_CONFIG": str(config)}
        # Started together, as a deploy starts replicas: the two interpreter start-ups overlap,
        # and the migrations meet at the migration lock (tests/test_migrate_race.py).
        replicas = [serving_process(env) for _ in range(2)]
        with ThreadPoolExecutor(len(replicas)) as pool:
            starts = [pool.submit(replica.__enter__) for replica in replicas]
        failures = [error for error in (start.exception() for start in starts)
                    if error is not None]
        for replica, start in zip(replicas, starts, strict=True):
            if start.exception() is None:
                stack.push(replica)
        if failures:
            raise failures[0]  # the started one is stopped by the stack on the way out
        yield [start.result().url for start in starts]


def verified_not_applied(client: httpx.Client, url: str, op: str) -> None:
    """An operation whose first attempt timed out and an authoritative read found nothing."""
    now = datetime.now(UTC).isoformat()
    intent = {"operation_id": op, "request_hash": HASH, "idempotency_key": f"k-{op}",
              "provider": PROVIDER, "action": "charge", "effect": "non_idempotent"}
    assert client.post(f"{url}/v1/operations", json=intent).status_code == 201
    attempt = {"attempt": 1, "idempotency_key": f"k-{op}", "request_hash": HASH, "at": now,
               "outcome": "timeout"}
    assert client.post(f"{url}/v1/operations/{op}/attempts", json=attempt).status_code == 201
    time.sleep(0.002)  # the zero must come strictly after the dispatch
    zero = {"kind": "observation", "probe": "by_id", "authority": "authoritative",
            "matches": []}
    answer = client.post(f"{url}/v1/operations/{op}/evidence", json=zero)
    assert answer.status_code == 201 and answer.json()["verdict"] == "verified_not_applied"


def test_32_concurrent_retry_requests_through_two_replicas_get_exactly_one_grant(
        replicas: list[str], pytestconfig: pytest.Config) -> None:
    with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=64)) as client, \
            ThreadPoolExecutor(max_workers=32) as pool:
        for round_ in range(scaled(pytestconfig, GRANT_ROUNDS)):
            op = f"op-{round_}-{uuid.uuid4().hex[:6]}"
            verified_not_applied(client, replicas[0], op)
            asks = [(f"{replicas[n % 2]}/v1/operations/{op}/retry",
                     {"idempotency_key": f"k-{op}", "request_hash": HASH, "holder": f"w{n}"})
                    for n in range(32)]
            answers = list(pool.map(lambda ask: client.post(ask[0], json=ask[1]), asks))
            granted = [a for a in answers if a.status_code == 200 and a.json()["allowed"]]
            refused = [a for a in answers if a.status_code == 409]
            assert len(granted) == 1, f"round {round_}: {len(granted)} grants"
            assert len(refused) == 31, [a.status_code for a in answers]


class _Lookup(BaseHTTPRequestHandler):
    """A provider read API that notices when one operation is read twice at the same time."""

    inside: ClassVar[dict[str, int]] = {}
    reads: ClassVar[dict[str, int]] = {}
    overlaps: ClassVar[list[str]] = []
    lock = threading.Lock()

    def do_GET(self) -> None:
        op = self.path.rsplit("/", 1)[-1]
        with self.lock:
            self.inside[op] = self.inside.get(op, 0) + 1
            self.reads[op] = self.reads.get(op, 0) + 1
            if self.inside[op] > 1:
                self.overlaps.append(op)
        time.sleep(0.05)
        with self.lock:
            self.inside[op] -= 1
        body = json.dumps({"matches": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def lookup_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Lookup)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[list[str]]:
    with running_replicas(tmp_path) as urls:
        yield urls


@pytest.fixture
def probed_replicas(lookup_server: str, tmp_path: Path) -> Iterator[list[str]]:
    with running_replicas(tmp_path, lookup_server) as urls:
        yield urls


def test_two_replicas_divide_the_sweep_without_probing_one_operation_twice_at_once(
        probed_replicas: list[str]) -> None:
    ops = [f"sweep-{n}-{uuid.uuid4().hex[:6]}" for n in range(16)]
    with httpx.Client(timeout=30) as client:
        for n, op in enumerate(ops):
            url = probed_replicas[n % 2]
            intent = {"operation_id": op, "request_hash": HASH, "idempotency_key": f"k-{op}",
                      "provider": PROVIDER, "action": "charge", "effect": "non_idempotent"}
            assert client.post(f"{url}/v1/operations", json=intent).status_code == 201
            attempt = {"attempt": 1, "idempotency_key": f"k-{op}", "request_hash": HASH,
                       "outcome": "timeout"}
            assert client.post(f"{url}/v1/operations/{op}/attempts",
                               json=attempt).status_code == 201
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and min(_Lookup.reads.get(op, 0) for op in ops) < 3:
        time.sleep(0.1)
    assert all(_Lookup.reads.get(op, 0) >= 3 for op in ops), _Lookup.reads
    assert not _Lookup.overlaps


#: Rounds of the send race, each on an operation of its own; times `--fault-scale`.
SEND_ROUNDS = 3
#: The racers' retry lease, and how long the first holder of each round stalls past it.
RACE_LEASE_S, STALL_S = 1.0, 1.4


@dataclass
class _Round:
    """What one round's racers did: who was granted, who opened (and so sent), who was
    refused at the opening."""

    op: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    granted: list[str] = field(default_factory=list)
    opened: list[tuple[str, int]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def first_grant(self, racer: str) -> bool:
        with self.lock:
            self.granted.append(racer)
            return len(self.granted) == 1


def _race(client: httpx.Client, sidecar: str, sandbox: str, rnd: _Round, racer: str) -> None:
    """Ask until granted or told no; open the granted attempt with the grant's token; send
    (a charge at the sandbox, without an idempotency key: every send is one charge) only when
    the opening is accepted; complete it. The round's first holder stalls past its lease
    between grant and opening, as worker A did in the field trial."""
    op = rnd.op
    key = {"idempotency_key": f"k-{op}", "request_hash": HASH}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        answer = client.post(f"{sidecar}/v1/operations/{op}/retry",
                             json={**key, "holder": racer})
        if answer.status_code == 409:
            time.sleep(0.1)  # another holds the lease: it may yet lapse
            continue
        grant = answer.json()
        if not grant["allowed"]:
            return
        if rnd.first_grant(racer):
            time.sleep(STALL_S)
        n = grant["attempt"]
        opening = {**key, "attempt": n, "outcome": "dispatching", "holder": racer,
                   "grant": grant["grant"]}
        opened = client.post(f"{sidecar}/v1/operations/{op}/attempts", json=opening)
        if not opened.is_success:  # as the official client: any 2xx is "send"
            assert opened.json()["type"].endswith("/retry-not-granted"), opened.text
            with rnd.lock:
                rnd.refused.append(racer)
            return
        with rnd.lock:
            rnd.opened.append((racer, n))
        sent = client.post(f"{sandbox}/pay/v1/charges", headers=SANDBOX_CREDENTIALS["pay"], json={
            **BODY, "metadata": {"operation_id": op, "attempt": str(n), "racer": racer}})
        done = client.post(f"{sidecar}/v1/operations/{op}/attempts", json={
            **opening, "outcome": "response", "status": sent.status_code})
        assert done.status_code in (200, 201), done.text
        return


def test_32_racers_on_two_replicas_send_once_per_granted_and_opened_attempt(
        tmp_path: Path, pytestconfig: pytest.Config) -> None:
    """SPEC rule 6 across replicas: a grant is bound to the send. Counted at the provider (the
    sandbox's charges), not by counting grants: the trial's 464 of 464 grantless openers got a
    2xx and sent."""
    with running_replicas(tmp_path, retry_lease_s=RACE_LEASE_S) as urls, \
            running_sandbox() as sandbox, \
            httpx.Client(timeout=30, limits=httpx.Limits(max_connections=64)) as client, \
            ThreadPoolExecutor(max_workers=32) as pool:
        rounds = []
        for round_ in range(scaled(pytestconfig, SEND_ROUNDS)):
            rnd = _Round(f"race-{round_}-{uuid.uuid4().hex[:6]}")
            verified_not_applied(client, urls[0], rnd.op)
            list(pool.map(_race, [client] * 32, [urls[n % 2] for n in range(32)],
                          [sandbox.url] * 32, [rnd] * 32, [f"w{n}" for n in range(32)]))
            rounds.append(rnd)
        charges = [o["data"]["metadata"] for o in
                   client.get(f"{sandbox.url}/_sandbox/objects").json()["objects"]
                   if o["provider"] == "pay"]
    for rnd in rounds:
        sent = sorted((c["racer"], int(c["attempt"])) for c in charges
                      if c["operation_id"] == rnd.op)
        assert sent == sorted(rnd.opened), (rnd.op, sent, rnd.opened)
        assert len({n for _, n in sent}) == len(sent)  # one send per attempt number
        # The stalled first holder was refused at the opening and sent nothing.
        assert rnd.granted[0] in rnd.refused and len(rnd.granted) >= 2, rnd
