"""Bounded reconciliation with fake probes: misbehaving probes are evidence of nothing,
deadlines and budgets escalate, escalated operations are left alone, leases keep two sweepers
off one operation."""

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from probes.base import ProbeTarget
from reconciler.core.domain import (
    Attempt,
    Authority,
    Carried,
    Effect,
    Intent,
    Match,
    Observation,
    Outcome,
    ProviderContract,
    Verdict,
)
from reconciler.core.ports import Store
from reconciler.core.schedule import SweepPolicy
from reconciler.core.sight import Sight
from reconciler.ledger import Ledger
from reconciler.ledger.sweep import Sweeper, sweep_periodically
from reconciler.store.kinds import leases_of
from reconciler.testing import FakeProbe, ManualClock

from builders import H0, K0

#: A probe that reads where `charge` effects appear, by the key the intents carry.
SEES_CHARGES = Sight(frozenset({"charge"}), frozenset({Carried.IDEMPOTENCY_KEY}))


def reading(answer: Callable[[ProbeTarget], Any], name: str = "fake",
            sight: Sight = SEES_CHARGES) -> FakeProbe:
    """The kit's fake probe, answering `answer(target)` (garbage too: a probe breaking its
    contract), reading where charges appear unless told otherwise."""
    return FakeProbe(answer=answer, name=name, sight=sight)


CONTRACT = ProviderContract("pay", idempotency_keys=True, visibility_lag_s=0, inflight_s=0,
                            reconcile_deadline_s=600, max_attempts=3)


@pytest.fixture
def ledger(store: Store, clock: ManualClock) -> Ledger:
    store.put_contract(CONTRACT)
    return Ledger(store, clock)


def dispatched(ledger: Ledger, op: str = "op-1") -> str:
    now = ledger.clock()
    ledger.record_intent(Intent(op, H0, K0, "pay", "charge", Effect.NON_IDEMPOTENT, now))
    ledger.record_attempt(Attempt(op, 1, K0, H0, now, Outcome.TIMEOUT))
    return op


def sweeper(ledger: Ledger, *probes: Any, **policy: Any) -> Sweeper:
    return Sweeper(ledger, leases_of(ledger.store), lambda provider: probes,
                   SweepPolicy(**{"probe_timeout_s": 0.5, **policy}))


def observations(ledger: Ledger, op: str = "op-1") -> list[Observation]:
    return ledger.store.facts(op).of(Observation)


def zero(clock: ManualClock) -> Callable[[ProbeTarget], Observation]:
    return lambda target: Observation(target.operation_id, clock(), "fake",
                                      Authority.AUTHORITATIVE)


def test_a_probe_that_hangs_is_cut_off_and_recorded_unavailable(ledger: Ledger,
                                                                 clock: ManualClock) -> None:
    release = threading.Event()
    hanging = reading(lambda target: release.wait(30), "hangs")
    dispatched(ledger)
    clock.advance(1)
    started = time.monotonic()
    [judgement] = sweeper(ledger, hanging).sweep()
    release.set()
    assert time.monotonic() - started < 5
    [obs] = observations(ledger)
    assert obs.authority is Authority.UNAVAILABLE and "timed out" in (obs.error or "")
    assert judgement.decision.verdict is Verdict.INDETERMINATE


@pytest.mark.parametrize("answer", [
    lambda target: {"matches": ["ch_1"]},
    lambda target: None,
    lambda target: Observation("another-op", datetime.now(UTC), "x", Authority.AUTHORITATIVE,
                               (Match("ch_1"),)),
], ids=["a_dict", "none", "another_operation"])
def test_a_probe_that_returns_garbage_is_recorded_unavailable(
        ledger: Ledger, clock: ManualClock, answer: Callable[[ProbeTarget], Any]) -> None:
    dispatched(ledger)
    [judgement] = sweeper(ledger, reading(answer)).sweep()
    assert [o.authority for o in observations(ledger)] == [Authority.UNAVAILABLE]
    assert judgement.decision.verdict is Verdict.INDETERMINATE


def test_a_probe_that_raises_is_recorded_unavailable(ledger: Ledger, clock: ManualClock) -> None:
    def boom(target: ProbeTarget) -> Observation:
        raise ConnectionError("provider down")
    dispatched(ledger)
    [judgement] = sweeper(ledger, reading(boom)).sweep()
    assert [o.authority for o in observations(ledger)] == [Authority.UNAVAILABLE]
    assert judgement.decision.verdict is Verdict.INDETERMINATE


def test_a_conclusive_zero_ends_reconciliation(ledger: Ledger, clock: ManualClock) -> None:
    probe = reading(zero(clock))
    dispatched(ledger)
    clock.advance(1)
    runner = sweeper(ledger, probe)
    [judgement] = runner.sweep()
    assert judgement.decision.verdict is Verdict.VERIFIED_NOT_APPLIED
    clock.advance(3600)
    assert runner.sweep() == [] and len(probe.calls) == 1


def test_an_operation_stays_due_until_its_settle_time_and_the_late_effect_is_found(
        ledger: Ledger, clock: ManualClock) -> None:
    # The provider may apply a timed-out request for 20 s; it commits it at 12 s. The zero read
    # before that proves nothing, the operation stays due, and the read after the settle time
    # finds the charge: never a retry (SPEC section 4, settle time).
    ledger.store.put_contract(replace(CONTRACT, inflight_s=20))
    start = clock()
    committed = start + timedelta(seconds=12)

    def provider(target: ProbeTarget) -> Observation:
        found = (Match("ch_late", H0),) if clock() >= committed else ()
        return Observation(target.operation_id, clock(), "fake", Authority.AUTHORITATIVE, found)

    probe = reading(provider)
    dispatched(ledger)
    runner = sweeper(ledger, probe, first_backoff_s=300, max_backoff_s=300)
    clock.advance(1)
    [early] = runner.sweep()
    assert early.decision.verdict is Verdict.INDETERMINATE and not early.decision.retry_allowed
    clock.advance(18)
    assert runner.sweep() == []  # not yet settled; the backoff alone would wait 300 s
    clock.advance(2)
    [late] = runner.sweep()
    assert late.decision.verdict is Verdict.VERIFIED_APPLIED and len(probe.calls) == 2


def test_a_zero_read_at_the_very_settle_instant_is_read_again_just_after(
        ledger: Ledger, clock: ManualClock) -> None:
    # A zero counts only strictly after the settle time: one read at its instant is followed
    # by a read just after, not by the backoff.
    ledger.store.put_contract(replace(CONTRACT, inflight_s=20))
    probe = reading(zero(clock))
    dispatched(ledger)
    runner = sweeper(ledger, probe, first_backoff_s=300, max_backoff_s=300)
    clock.advance(20)
    [at_instant] = runner.sweep()
    assert at_instant.decision.verdict is Verdict.INDETERMINATE
    clock.advance(0.01)
    [after] = runner.sweep()
    assert after.decision.verdict is Verdict.VERIFIED_NOT_APPLIED and len(probe.calls) == 2


def test_an_operation_without_an_attempt_is_not_probed(ledger: Ledger, clock: ManualClock) -> None:
    probe = reading(zero(clock))
    ledger.record_intent(Intent("op-1", H0, K0, "pay", "charge", Effect.NON_IDEMPOTENT, clock()))
    assert sweeper(ledger, probe).sweep() == [] and len(probe.calls) == 0


def test_rounds_back_off_until_the_next_probe_time(ledger: Ledger, clock: ManualClock) -> None:
    probe = reading(lambda t: Observation(t.operation_id, clock(), "fake", Authority.WEAK))
    dispatched(ledger)
    runner = sweeper(ledger, probe, first_backoff_s=10)
    runner.sweep()
    clock.advance(5)
    assert runner.sweep() == []  # not due yet: the first backoff is 10 s
    clock.advance(5)
    assert len(runner.sweep()) == 1
    clock.advance(10)
    assert runner.sweep() == []  # the second backoff is 20 s
    assert len(probe.calls) == 2


def test_the_deadline_escalates_and_probing_stops(ledger: Ledger, clock: ManualClock) -> None:
    probe = reading(lambda t: Observation(t.operation_id, clock(), "fake", Authority.UNAVAILABLE,
                                          (), "down"))
    dispatched(ledger)
    runner = sweeper(ledger, probe, first_backoff_s=1000)
    runner.sweep()
    clock.advance(600)
    [judgement] = runner.sweep()
    assert judgement.decision.next_action == "escalate_to_human"
    [summary] = ledger.store.list_operations(escalated=True)
    assert summary.operation_id == "op-1" and summary.verdict == "indeterminate"
    clock.advance(10_000)
    assert runner.sweep() == [] and len(probe.calls) == 2
    assert not judgement.decision.retry_allowed


def test_the_probe_budget_escalates(ledger: Ledger, clock: ManualClock) -> None:
    probe = reading(lambda t: Observation(t.operation_id, clock(), "fake", Authority.WEAK))
    dispatched(ledger)
    runner = sweeper(ledger, probe, probe_budget=3, first_backoff_s=1)
    for _ in range(10):
        runner.sweep()
        clock.advance(5)
    assert len(probe.calls) == 3
    assert [o.operation_id for o in ledger.store.list_operations(escalated=True)] == ["op-1"]


def test_two_sweepers_never_probe_one_operation_at_once(ledger: Ledger, clock: ManualClock) -> None:
    inside: dict[str, int] = {}
    overlap: list[str] = []
    lock = threading.Lock()

    def slow(target: ProbeTarget) -> Observation:
        with lock:
            inside[target.operation_id] = inside.get(target.operation_id, 0) + 1
            if inside[target.operation_id] > 1:
                overlap.append(target.operation_id)
        time.sleep(0.05)
        with lock:
            inside[target.operation_id] -= 1
        return Observation(target.operation_id, clock(), "fake", Authority.WEAK)

    for n in range(12):
        dispatched(ledger, f"op-{n}")
    probe = reading(slow)
    a = sweeper(ledger, probe, first_backoff_s=0.0001)
    b = sweeper(ledger, probe, first_backoff_s=0.0001)
    threads = [threading.Thread(target=s.sweep) for s in (a, b, a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not overlap
    assert len(probe.calls) >= 12


def test_on_demand_reconcile_is_refused_while_another_sweeper_holds_the_lease(
        ledger: Ledger, clock: ManualClock) -> None:
    dispatched(ledger)
    leases = leases_of(ledger.store)
    assert leases.claim("op-1", "someone-else", clock(), 60)
    assert sweeper(ledger, reading(zero(clock))).reconcile("op-1") is None
    clock.advance(61)
    judgement = sweeper(ledger, reading(zero(clock))).reconcile("op-1")
    assert judgement is not None and judgement.decision.verdict is Verdict.VERIFIED_NOT_APPLIED


def test_closing_a_sweeper_releases_its_leases(ledger: Ledger, clock: ManualClock) -> None:
    dispatched(ledger)
    runner = sweeper(ledger)
    leases = leases_of(ledger.store)
    assert leases.claim("op-1", runner.holder, clock(), 60)
    runner.close()
    assert leases.claim("op-1", "next", clock(), 60)


def test_apscheduler_drives_the_periodic_sweep(ledger: Ledger, clock: ManualClock) -> None:
    probed = threading.Event()

    def answer(target: ProbeTarget) -> Observation:
        probed.set()
        return Observation(target.operation_id, clock(), "fake", Authority.AUTHORITATIVE)

    dispatched(ledger)
    clock.advance(1)
    scheduler = sweep_periodically(sweeper(ledger, reading(answer)), every_s=0.1)
    try:
        assert probed.wait(10)
    finally:
        scheduler.shutdown(wait=True)
    assert ledger.judge("op-1").decision.verdict is Verdict.VERIFIED_NOT_APPLIED


# --- a zero counts only where the probe could have seen the effect (SPEC section 3) ----------

def test_an_empty_read_by_a_probe_that_does_not_cover_the_action_is_unavailable_probe_blind(
        ledger: Ledger, clock: ManualClock) -> None:
    refunds = reading(zero(clock), sight=Sight(frozenset({"refund"}),
                                               frozenset({Carried.IDEMPOTENCY_KEY})))
    dispatched(ledger)
    clock.advance(3600)  # long settled: only what the probe could see keeps the zero out
    [judgement] = sweeper(ledger, refunds).sweep()
    [obs] = observations(ledger)
    assert obs.authority is Authority.UNAVAILABLE and not obs.matches
    assert (obs.error or "").startswith("probe_blind: scope: probe 'fake' does not cover "
                                        "action 'charge'")
    assert judgement.decision.verdict is Verdict.INDETERMINATE
    assert not judgement.decision.retry_allowed


def test_an_empty_read_by_key_of_a_keyless_intent_is_unavailable_probe_blind(
        ledger: Ledger, clock: ManualClock) -> None:
    now = clock()
    ledger.record_intent(Intent("op-1", H0, None, "pay", "charge", Effect.NON_IDEMPOTENT, now))
    ledger.record_attempt(Attempt("op-1", 1, None, H0, now, Outcome.TIMEOUT))
    clock.advance(3600)
    [judgement] = sweeper(ledger, reading(zero(clock))).sweep()  # reads by key
    [obs] = observations(ledger)
    assert obs.authority is Authority.UNAVAILABLE
    assert (obs.error or "").startswith("probe_blind: correlation: probe 'fake' finds effects "
                                        "by something the request did not carry")
    assert judgement.decision.verdict is Verdict.INDETERMINATE


def test_a_match_by_a_probe_blind_to_the_operation_keeps_its_authority(
        ledger: Ledger, clock: ManualClock) -> None:
    found = reading(lambda target: Observation(target.operation_id, clock(), "fake",
                                               Authority.AUTHORITATIVE, (Match("ch_1"),)),
                    sight=Sight())
    dispatched(ledger)
    [judgement] = sweeper(ledger, found).sweep()
    [obs] = observations(ledger)
    assert obs.authority is Authority.AUTHORITATIVE and obs.matches == (Match("ch_1"),)
    assert judgement.decision.verdict is Verdict.VERIFIED_APPLIED


def test_a_probe_by_reference_sees_the_operation_once_the_provider_returned_a_ref(
        ledger: Ledger, clock: ManualClock) -> None:
    by_ref = reading(zero(clock), sight=Sight(frozenset({"charge"}),
                                              frozenset({Carried.PROVIDER_REF})))
    now = clock()
    for op, receipt in (("op-lost", None), ("op-answered", Match("ch_1"))):
        ledger.record_intent(Intent(op, H0, K0, "pay", "charge", Effect.NON_IDEMPOTENT, now))
        ledger.record_attempt(Attempt(op, 1, K0, H0, now, Outcome.RESPONSE, 202, receipt))
    clock.advance(1)
    sweeper(ledger, by_ref).sweep()
    assert [o.authority for o in observations(ledger, "op-lost")] == [Authority.UNAVAILABLE]
    assert [o.authority for o in observations(ledger, "op-answered")] == [
        Authority.AUTHORITATIVE]
