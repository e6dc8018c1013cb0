"""Every report of an attempt is kept (SPEC section 4, issue 31): a late answer after a timeout,
two reports racing, another key or hash. Only an identical repeat of a report kept is not new.
Part of the store contract (tests/test_store_contract.py): the same tests on the in-memory twin,
SQLite and PostgreSQL. The field trial lost the 2xx reported after a timeout (a 409, 5 of 5
concurrently and 1 of 1 in sequence), so a later zero gave verified_not_applied where SPEC
says false_success.
"""

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from reconciler.core.domain import Attempt, Carried, Outcome, ProviderContract
from reconciler.core.ports import Store
from reconciler.core.summary import summarize
from reconciler.ledger import Ledger
from reconciler.store.sql import SqlStore
from reconciler.testing import ManualClock

from builders import OP, OTHER_HASH, attempt, intent, t


def timeout(op: str = OP) -> Attempt:
    return replace(attempt(1, 1), operation_id=op, recorded_at=t(2))


def answered(status: int, recorded: float = 40, op: str = OP) -> Attempt:
    """Attempt 1's answer, reported when it came in (`recorded`), dispatched at t(1)."""
    return replace(attempt(1, 1, Outcome.RESPONSE, status=status), operation_id=op,
                   recorded_at=t(recorded))


def test_a_2xx_reported_after_a_timeout_for_the_same_attempt_is_kept_and_is_a_success_claim(
        store: Store) -> None:
    store.record_intent(intent())
    assert store.record_attempt(timeout()) is True
    assert store.record_attempt(answered(200)) is True
    facts = store.facts(OP)
    assert facts.attempts == (timeout(), answered(200))
    assert summarize(facts).success_claim


def test_a_timeout_reported_after_a_2xx_for_the_same_attempt_is_kept_and_the_claim_stands(
        store: Store) -> None:
    store.record_intent(intent())
    assert store.record_attempt(answered(201, recorded=2)) is True
    assert store.record_attempt(replace(timeout(), recorded_at=t(40))) is True
    facts = store.facts(OP)
    assert [a.outcome for a in facts.attempts] == [Outcome.RESPONSE, Outcome.TIMEOUT]
    assert summarize(facts).success_claim


def test_a_4xx_after_a_timeout_and_reports_with_another_key_or_hash_are_kept_not_refused(
        store: Store) -> None:
    store.record_intent(intent())
    reports = [timeout(), answered(409), replace(answered(200), idempotency_key="key-9"),
               replace(answered(200), request_hash=OTHER_HASH)]
    assert [store.record_attempt(r) for r in reports] == [True] * 4
    facts = store.facts(OP)
    assert facts.attempts == tuple(reports)
    assert summarize(facts).inconsistent  # the other key and hash are seen by the rules


def test_an_identical_repeat_of_a_report_kept_is_not_new(store: Store) -> None:
    store.record_intent(intent())
    store.record_attempt(timeout())
    store.record_attempt(answered(200))
    # Each again, recorded later: repeats of reports kept, whichever came first.
    assert store.record_attempt(answered(200, recorded=60)) is False
    assert store.record_attempt(replace(timeout(), recorded_at=t(61))) is False
    assert store.facts(OP).attempts == (timeout(), answered(200))


def race(store: Store, reports: list[Attempt]) -> list[bool]:
    """Record `reports` from as many threads at once (bounded: a minute at most)."""
    start = threading.Barrier(len(reports), timeout=30)

    def report(one: Attempt) -> bool:
        start.wait()
        return store.record_attempt(one)

    with ThreadPoolExecutor(len(reports)) as pool:
        return list(pool.map(report, reports, timeout=60))


def test_two_reports_of_one_attempt_racing_are_both_kept(store: Store) -> None:
    for n in range(5):  # the field trial lost 5 of 5
        op = f"op-race-{n}"
        store.record_intent(replace(intent(), operation_id=op))
        assert race(store, [timeout(op), answered(200, op=op)]) == [True, True]
        facts = store.facts(op)
        assert sorted(a.outcome for a in facts.attempts) == [Outcome.RESPONSE, Outcome.TIMEOUT]
        assert summarize(facts).success_claim


def test_an_identical_report_racing_itself_is_kept_once(store: Store) -> None:
    store.record_intent(intent())
    assert sorted(race(store, [answered(200), answered(200, recorded=41)])) == [False, True]
    assert [a.status for a in store.facts(OP).attempts] == [200]


def test_a_report_without_a_dispatch_time_of_a_recorded_attempt_takes_its_dispatch_time(
        store: Store) -> None:
    """A caller that names no dispatch time (HTTP without `at`) is stamped with the ledger's
    clock: a resend is then the same report, and a late answer keeps the attempt's dispatch
    time, not the moment it came in."""
    clock = ManualClock(t(1))
    ledger = Ledger(store, clock=clock)
    ledger.record_intent(intent())
    assert ledger.record_attempt(attempt(1, 0), stamped=True).created is True
    clock.set(t(50))
    assert ledger.record_attempt(attempt(1, 0), stamped=True).created is False
    clock.set(t(90))
    late = ledger.record_attempt(attempt(1, 0, Outcome.RESPONSE, status=200), stamped=True)
    assert late.created is True
    assert [(a.outcome, a.at, a.recorded_at) for a in store.facts(OP).attempts] == [
        (Outcome.TIMEOUT, t(1), t(1)), (Outcome.RESPONSE, t(1), t(90))]


@pytest.mark.parametrize("carries", [None, frozenset(), frozenset({Carried.OPERATION_ID}),
                                     frozenset(Carried)])
def test_what_an_intent_carried_is_kept_as_given(store: Store,
                                                 carries: frozenset[Carried] | None) -> None:
    store.record_intent(replace(intent(), carries=carries))
    assert store.facts(OP).intent.carries == carries


def test_an_ungranted_retry_and_a_providers_inflight_s_are_kept(store: Store) -> None:
    store.record_intent(intent())
    ungranted = replace(attempt(2, 5, Outcome.RESPONSE, status=200), ungranted=True)
    store.record_attempt(attempt(1, 1))
    store.record_attempt(ungranted)
    assert store.facts(OP).attempts[1] == ungranted
    contract = ProviderContract(name="slow", inflight_s=300.0)
    store.put_contract(contract)
    # Read back from the database, not from the store's cache of contracts.
    reread = SqlStore(store.engine) if isinstance(store, SqlStore) else store
    assert reread.contract("slow") == contract
