"""SPEC rule 6 (issue 31): a granted retry is a lease held by exactly one caller, bound to the
attempt it allows. The sidecar opens that attempt for sending only for the holder of the live
grant (its token presented), and refuses it once the lease has expired, to any other caller, to a
caller with no grant, and once new evidence has changed the verdict the grant rested on. An
attempt reported as already sent without a live grant is recorded all the same, `ungranted`,
and does not take the real holder's grant away.

The field trial these reproduce (all 2xx, so the official client sent): an expired grant opening
attempt 2 after another holder had opened it, a caller with no grant at all opening it, and the
real holder refused after a one-phase report took its number. Each runs on the in-memory twin,
SQLite and PostgreSQL, on a manual clock; the HTTP tests check the wire (token, problem type).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import text

from reconciler.client import ReconcilerClient, RecordedOut
from reconciler.core.domain import (
    Attempt,
    Authority,
    Effect,
    Intent,
    Observation,
    Outcome,
    ProviderContract,
    Receipt,
    Verdict,
)
from reconciler.core.errors import RetryNotGrantedError, RetryRefusedError
from reconciler.core.ports import Store
from reconciler.core.schemas import AttemptIn, IntentIn, OperationOut, RetryIn
from reconciler.ledger import Ledger
from reconciler.ledger.gate import GateAnswer, RetryGate, RetryRequest
from reconciler.store.kinds import leases_of
from reconciler.store.sql import SqlStore
from reconciler.testing import ManualClock

from sidecar_client import H, Sidecar, assert_problem, running_sidecar

OP, KEY = "op-1", "key-op-1"
TTL_S = 2.0
#: The HTTP tests' lease, on the real clock: long enough for a loaded machine to ask twice.
HTTP_TTL_S = 1.0
#: Settles at once and is seen at once: a zero read right after a dispatch is conclusive.
PAY = ProviderContract("pay", idempotency_keys=True, visibility_lag_s=0, max_attempts=5,
                       inflight_s=0)


@dataclass
class World:
    gate: RetryGate
    ledger: Ledger
    clock: ManualClock

    def not_applied(self, effect: Effect = Effect.IDEMPOTENT_WRITE) -> None:
        """Attempt 1 timed out, and an authoritative read then found nothing."""
        self.ledger.record_intent(Intent(OP, H, KEY, "pay", "charge", effect, self.clock()))
        self.ledger.record_attempt(self.attempt(1, Outcome.TIMEOUT))
        self.zero()

    def zero(self) -> None:
        self.clock.advance(1)
        judged = self.ledger.record_evidence(Observation(OP, self.clock(), "lookup",
                                                         Authority.AUTHORITATIVE))
        assert judged.decision.verdict is Verdict.VERIFIED_NOT_APPLIED

    def attempt(self, n: int, outcome: Outcome = Outcome.DISPATCHING) -> Attempt:
        self.clock.advance(0.1)
        return Attempt(OP, n, KEY, H, self.clock(), outcome,
                       200 if outcome is Outcome.RESPONSE else None)

    def ask(self, holder: str) -> GateAnswer:
        return self.gate.ask(RetryRequest(OP, KEY, H, holder))

    def open(self, n: int, holder: str | None, token: str | None) -> bool:
        """Open attempt n as an HTTP caller does (a token always checked): sent?"""
        try:
            self.gate.record_attempt(self.attempt(n), holder, token=token or "")
        except RetryNotGrantedError:
            return False
        return True

    def numbers(self) -> list[int]:
        return [a.number for a in self.ledger.store.facts(OP).attempts]


@pytest.fixture
def world(store: Store) -> World:
    store.put_contract(PAY)
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    ledger = Ledger(store, clock=clock)
    return World(RetryGate(ledger, leases_of(store), lease_ttl_s=TTL_S), ledger, clock)


# -- 1: opening attempt n needs the live grant, with its token --------------------------------

def test_an_expired_grant_cannot_open_the_attempt_another_holder_opened(world: World) -> None:
    world.not_applied()
    a = world.ask("a")
    world.clock.advance(TTL_S + 1)  # a stalls past its lease
    b = world.ask("b")
    assert (a.attempt, b.attempt, b.allowed) == (2, 2, True)
    assert world.open(2, "b", b.token)
    assert not world.open(2, "a", a.token)  # the trial: 200, and a sent attempt 2 again
    assert world.numbers() == [1, 2]


def test_a_caller_with_no_grant_cannot_open_an_opened_attempt(world: World) -> None:
    world.not_applied()
    b = world.ask("b")
    assert world.open(2, "b", b.token)
    assert not world.open(2, None, None)  # the trial: 200
    assert not world.open(2, "b", None)  # the holder's name alone, without the token
    assert not world.open(2, "b", "not-the-token")


def test_an_expired_grant_opens_nothing_even_when_no_one_else_asked(world: World) -> None:
    world.not_applied()
    a = world.ask("a")
    world.clock.advance(TTL_S + 1)
    assert not world.open(2, "a", a.token)
    assert world.numbers() == [1]


def test_the_holder_opens_its_attempt_once_and_may_repeat_the_opening(world: World) -> None:
    world.not_applied()
    a = world.ask("a")
    opening = world.attempt(2)
    assert world.gate.record_attempt(opening, "a", token=a.token).created
    assert not world.gate.record_attempt(opening, "a", token=a.token).created  # a resend
    assert not world.open(3, "a", a.token)  # one grant, one attempt


def test_the_grant_token_is_kept_only_as_its_hash(world: World) -> None:
    world.not_applied()
    a = world.ask("a")
    assert a.token is not None and len(a.token) >= 40
    lease = world.gate.leases.retry_lease(OP, world.clock())
    assert lease is not None and lease.grant == hashlib.sha256(a.token.encode()).hexdigest()
    again = world.ask("a")  # asking again renews the lease under a new token
    assert again.token != a.token and world.open(2, "a", again.token)
    assert not world.open(2, "a", a.token)


# -- 2: a report sent without a grant is recorded, ungranted, and moves the grant on ---------

def test_a_report_sent_without_a_grant_is_recorded_ungranted(world: World) -> None:
    world.not_applied()
    h = world.ask("h")
    report = world.gate.record_attempt(world.attempt(2, Outcome.TIMEOUT), None, token="")
    assert report.created
    assert [(a.number, a.ungranted) for a in world.ledger.store.facts(OP).attempts] == [
        (1, False), (2, True)]
    assert not world.open(2, "h", h.token)  # its number is taken: not sent twice
    world.zero()  # attempt 2 is shown not applied too: the verdict the grant rests on again
    assert world.open(3, "h", h.token)  # the holder still has its grant, for the next number


def test_a_report_sent_under_the_live_grant_is_not_ungranted(world: World) -> None:
    world.not_applied()
    h = world.ask("h")
    world.gate.record_attempt(world.attempt(2, Outcome.TIMEOUT), "h", token=h.token)
    assert [a.ungranted for a in world.ledger.store.facts(OP).attempts] == [False, False]


def test_the_completion_of_a_granted_opening_is_not_ungranted(world: World) -> None:
    world.not_applied()
    h = world.ask("h")
    assert world.open(2, "h", h.token)
    world.clock.advance(TTL_S + 1)  # the answer comes after the lease ran out
    world.gate.record_attempt(world.attempt(2, Outcome.RESPONSE), "h", token=h.token)
    assert [(a.outcome, a.ungranted) for a in world.ledger.store.facts(OP).attempts][1] == (
        Outcome.RESPONSE, False)


# -- 3: a grant lapses with the verdict it rests on -----------------------------------------

def test_a_grant_lapses_when_new_evidence_changes_its_verdict(world: World) -> None:
    world.not_applied()
    h = world.ask("h")
    world.clock.advance(0.1)
    world.ledger.record_evidence(Receipt(OP, world.clock(), "ch_1", H, "webhook"))
    assert not world.open(2, "h", h.token)  # verified_applied now: sending would duplicate
    assert world.numbers() == [1]


# -- over HTTP: the token on the wire, the refusal a client reads as "do not send" -----------

def _opening(n: int, holder: str | None, grant: str | None) -> dict[str, object]:
    body: dict[str, object] = {"attempt": n, "idempotency_key": KEY, "request_hash": H,
                               "outcome": "dispatching", "holder": holder}
    if grant is not None:
        body["grant"] = grant
    return body


def _not_applied_over_http(sidecar: Sidecar) -> None:
    sidecar.post("/v1/operations", {"operation_id": OP, "request_hash": H,
                                    "idempotency_key": KEY, "provider": "pay",
                                    "action": "charge", "effect": "idempotent_write"})
    sidecar.attempt(OP)
    sidecar.zero(OP)


@pytest.fixture
def fast(store_url: str) -> Iterator[Sidecar]:
    with running_sidecar(store_url, retry_lease_ttl_s=HTTP_TTL_S) as sidecar:
        sidecar.store.put_contract(PAY)
        yield sidecar


def test_over_http_an_opening_without_the_live_grant_is_refused_do_not_send(
        fast: Sidecar) -> None:
    _not_applied_over_http(fast)
    a = fast.retry(OP, "a").json()
    assert a["allowed"] and a["grant"]
    busy = assert_problem(fast.retry(OP, "b"), 409, "retry-in-progress")
    assert busy.get("grant") is None  # a token goes to its holder only
    time.sleep(HTTP_TTL_S + 0.3)  # a stalls past its lease
    b = fast.retry(OP, "b").json()
    url = f"/v1/operations/{OP}/attempts"
    assert fast.http.post(url, json=_opening(2, "b", b["grant"])).status_code == 201
    assert fast.http.post(url, json=_opening(2, "b", b["grant"])).status_code == 200  # resent
    assert_problem(fast.http.post(url, json=_opening(2, "a", a["grant"])), 409,
                   "retry-not-granted")
    assert_problem(fast.http.post(url, json=_opening(2, None, None)), 409, "retry-not-granted")
    assert_problem(fast.http.post(url, json=_opening(2, "b", None)), 409, "retry-not-granted")
    store = fast.store
    assert isinstance(store, SqlStore)
    with store.engine.connect() as conn:
        kept = conn.execute(text("SELECT retry_grant FROM operation_state")).scalar_one()
    assert kept == hashlib.sha256(b["grant"].encode()).hexdigest() != b["grant"]


def test_over_http_a_one_phase_report_without_a_grant_is_recorded_ungranted(
        fast: Sidecar) -> None:
    _not_applied_over_http(fast)
    assert fast.retry(OP, "h").json()["allowed"]
    fast.attempt(OP, 2)  # a timeout report, no grant: recorded, never refused
    out = fast.get(f"/v1/operations/{OP}")
    assert [a["attempt"] for a in out["attempts"]] == [1, 2]
    facts = fast.store.facts(OP)
    assert [a.ungranted for a in facts.attempts] == [False, True]


# -- the Python client: never sends without a live grant -------------------------------------

def test_the_client_reads_retry_not_granted_as_do_not_send(fast: Sidecar) -> None:
    _not_applied_over_http(fast)
    opening = AttemptIn(attempt=2, idempotency_key=KEY, request_hash=H,
                        outcome=Outcome.DISPATCHING, holder="a")
    with ReconcilerClient(fast.url) as client:
        grant = client.ask_retry(OP, RetryIn(idempotency_key=KEY, request_hash=H, holder="a"))
        assert grant.allowed and grant.grant
        opened = client.record_attempt(OP, opening.model_copy(update={"grant": grant.grant}))
        assert opened.created
        with pytest.raises(RetryNotGrantedError, match="do not send"):
            client.record_attempt(OP, opening)  # the holder's name without its token


class _Stalling(ReconcilerClient):
    """A worker that stalls between its grant and its opening, past the lease, while another
    worker is granted and sends: the field trial's worker A."""

    def __init__(self, url: str, meanwhile: Callable[[], object]) -> None:
        super().__init__(url)
        self.meanwhile = meanwhile

    def record_attempt(self, operation_id: str, attempt: AttemptIn) -> RecordedOut[OperationOut]:
        if attempt.outcome is Outcome.DISPATCHING and attempt.attempt >= 2:
            time.sleep(HTTP_TTL_S + 0.3)  # past its lease
            self.meanwhile()
        return super().record_attempt(operation_id, attempt)


def test_a_tracked_retry_whose_grant_expired_is_never_sent(fast: Sidecar) -> None:
    _not_applied_over_http(fast)
    sent: list[str] = []

    def send(who: str) -> Callable[[], httpx.Response]:
        def call() -> httpx.Response:
            sent.append(who)
            return httpx.Response(200)
        return call

    payment = IntentIn(operation_id=OP, request_hash=H, idempotency_key=KEY, provider="pay",
                       action="charge", effect=Effect.IDEMPOTENT_WRITE)

    def worker_b() -> None:
        with ReconcilerClient(fast.url) as b, b.track(payment, holder="b") as effect:
            effect.dispatch(send("b"))

    with _Stalling(fast.url, worker_b) as a, a.track(payment, holder="a") as effect, \
            pytest.raises(RetryRefusedError, match="do not send"):
        effect.dispatch(send("a"))
    assert sent == ["b"]  # the trial: a sent attempt 2 too
    assert [(x.number, x.outcome) for x in fast.store.facts(OP).attempts] == [
        (1, Outcome.TIMEOUT), (2, Outcome.RESPONSE)]
