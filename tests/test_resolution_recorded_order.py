"""An attempt recorded after a human's resolution reopens it, however it is dated (SPEC section
4: "an attempt is later when it was recorded after the resolution or dispatched after the
resolution's time"). Attempts and evidence are kept apart, so the ledger stamps a resolution
with the attempt reports recorded before it; the stamp is kept on every store. The field trial:
an attempt recorded after a human's verified_not_applied but stamped before it left the
decision standing, and a further send was granted.
"""


import pytest

from reconciler.core.domain import Effect, Resolution, Verdict
from reconciler.core.ports import Store
from reconciler.core.verdicts import Finding
from reconciler.ledger import Ledger
from reconciler.testing import ManualClock

from builders import CONTRACT, OP, attempt, intent, resolution, t


@pytest.fixture(autouse=True)
def contract(store: Store) -> None:
    """Every test's store knows the provider's contract."""
    store.put_contract(CONTRACT)


def test_a_resolution_keeps_the_count_of_attempt_reports_recorded_before_it(
        store: Store) -> None:
    ledger = Ledger(store, ManualClock(t(60)))
    ledger.record_intent(intent(Effect.IDEMPOTENT_WRITE))
    ledger.record_attempt(attempt(1, 1))
    ledger.record_evidence(resolution(60, Verdict.VERIFIED_NOT_APPLIED))
    [kept] = store.facts(OP).of(Resolution)
    assert kept.attempts_known == 1


def test_an_attempt_recorded_after_a_resolution_reopens_it_however_it_is_dated(
        store: Store) -> None:
    clock = ManualClock(t(2))
    ledger = Ledger(store, clock)
    ledger.record_intent(intent(Effect.NON_IDEMPOTENT))
    ledger.record_attempt(attempt(1, 1))
    clock.set(t(60))
    human = ledger.record_evidence(resolution(60, Verdict.VERIFIED_NOT_APPLIED))
    assert human.decision.verdict is Verdict.VERIFIED_NOT_APPLIED
    # The report arrives after the decision, at the very instant the clock shows, and claims
    # it was sent before it: a send the human did not know of.
    reported = ledger.record_attempt(attempt(2, 50))
    decision = reported.judgement.decision
    assert Finding.RESOLUTION_SUPERSEDED in decision.findings
    assert decision.verdict is Verdict.UNSAFE_RETRY and not decision.retry_allowed
