"""How a sweep pass runs its rounds: no more operations leased than probed at once, a hung probe
holding up nobody else, and each round concluded in one transaction (all of it recorded, or
none of it), several rounds together each to its own verdict, a lapsed lease's schedule left to
its new holder."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlmodel import Session, col, func, select
from test_sweep import reading

from probes.base import ProbeTarget
from reconciler import ledger as ledger_module
from reconciler.core.domain import (
    Attempt,
    Authority,
    Effect,
    Intent,
    Match,
    Observation,
    Outcome,
    ProviderContract,
    Verdict,
)
from reconciler.core.schedule import SweepPolicy
from reconciler.ledger import Ledger
from reconciler.ledger.sweep import Sweeper
from reconciler.store.leases import SqlLeases
from reconciler.store.sql import SqlStore
from reconciler.store.tables import StateRow
from reconciler.testing import ManualClock
from reconciler.testing.patience import PATIENCE_S

from builders import H0, K0

CONTRACT = ProviderContract("pay", idempotency_keys=True, visibility_lag_s=0, inflight_s=0,
                            reconcile_deadline_s=600, max_attempts=3)


#: The rounds' batches are the SQL store's: the `store` fixture gives SQLite and PostgreSQL.
pytestmark = pytest.mark.store_kinds("sqlite", "postgresql")


@pytest.fixture(autouse=True)
def contract(store: SqlStore) -> None:
    """Every test's store knows the provider's contract."""
    store.put_contract(CONTRACT)


def dispatched(store: SqlStore, clock: ManualClock, count: int) -> list[str]:
    ops = [f"op-{n}" for n in range(count)]
    for op in ops:
        store.record_intent(Intent(op, H0, K0, "pay", "charge", Effect.NON_IDEMPOTENT, clock()))
        store.record_attempt(Attempt(op, 1, K0, H0, clock(), Outcome.TIMEOUT))
    clock.advance(1)
    return ops


def sweeper(store: SqlStore, clock: ManualClock, probe: Any, **policy: Any) -> Sweeper:
    return Sweeper(Ledger(store, clock), SqlLeases(store), lambda provider: [probe],
                   SweepPolicy(**{"probe_timeout_s": 0.5, **policy}))


def zero(clock: ManualClock) -> Callable[[ProbeTarget], Observation]:
    return lambda t: Observation(t.operation_id, clock(), "fake", Authority.AUTHORITATIVE)


def state(store: SqlStore, op: str) -> StateRow:
    with Session(store.engine) as s:
        row = s.get(StateRow, op)
        assert row is not None
        return row


def test_a_pass_leases_no_more_operations_than_it_probes_at_once(store: SqlStore,
                                                                clock: ManualClock) -> None:
    ops = dispatched(store, clock, 7)
    leased: list[int] = []

    def counting(t: ProbeTarget) -> Observation:
        with Session(store.engine) as s:
            leased.append(s.exec(select(func.count()).select_from(StateRow)
                                 .where(col(StateRow.lease_holder).is_not(None))).one())
        return zero(clock)(t)

    judgements = sweeper(store, clock, reading(counting), concurrency=2).sweep()
    assert sorted(j.facts.intent.operation_id for j in judgements) == ops
    assert len(leased) == 7 and max(leased) <= 2


def test_a_hung_probe_holds_up_no_other_operation_of_the_pass(store: SqlStore,
                                                              clock: ManualClock) -> None:
    dispatched(store, clock, 5)
    release = threading.Event()

    def hangs_on_op_0(t: ProbeTarget) -> Observation:
        if t.operation_id == "op-0":
            release.wait(PATIENCE_S)
        return zero(clock)(t)

    try:
        judgements = sweeper(store, clock, reading(hangs_on_op_0), concurrency=2).sweep()
    finally:
        release.set()
    verdicts = {j.facts.intent.operation_id: j.decision.verdict for j in judgements}
    assert verdicts == {"op-0": Verdict.INDETERMINATE,
                        **{f"op-{n}": Verdict.VERIFIED_NOT_APPLIED for n in range(1, 5)}}
    [cut_off] = Ledger(store, clock).judge("op-0").facts.of(Observation)
    assert cut_off.authority is Authority.UNAVAILABLE and "timed out" in (cut_off.error or "")


def test_rounds_concluded_together_each_get_their_own_verdict(store: SqlStore,
                                                              clock: ManualClock) -> None:
    ops = dispatched(store, clock, 6)

    def applied_if_even(t: ProbeTarget) -> Observation:
        even = int(t.operation_id.removeprefix("op-")) % 2 == 0
        matches = (Match(f"ch_{t.operation_id}", H0),) if even else ()
        return Observation(t.operation_id, clock(), "fake", Authority.AUTHORITATIVE, matches)

    sweeper(store, clock, reading(applied_if_even), concurrency=6).sweep()
    assert [state(store, op).verdict for op in ops] == [
        Verdict.VERIFIED_APPLIED.value, Verdict.VERIFIED_NOT_APPLIED.value] * 3
    assert all(len(Ledger(store, clock).judge(op).facts.evidence) == 1 for op in ops)


def test_a_round_that_cannot_conclude_records_nothing_and_releases_its_lease(
        store: SqlStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    [op] = dispatched(store, clock, 1)

    def broken_rule(*args: Any) -> Any:
        raise RuntimeError("the rule broke mid-transaction")

    monkeypatch.setattr(ledger_module, "decide", broken_rule)
    with pytest.raises(RuntimeError):
        sweeper(store, clock, reading(zero(clock))).sweep()
    after = state(store, op)
    assert store.facts(op).evidence == ()
    assert (after.verdict, after.lease_holder, after.probe_count) == (
        Verdict.INDETERMINATE.value, None, 1)


def test_a_round_whose_lease_was_taken_over_records_what_it_saw_and_leaves_the_schedule(
        store: SqlStore, clock: ManualClock) -> None:
    [op] = dispatched(store, clock, 1)
    leases = SqlLeases(store)

    def lease_lapses_meanwhile(t: ProbeTarget) -> Observation:
        clock.advance(61)
        assert leases.claim(t.operation_id, "next-holder", clock(), 60)
        return zero(clock)(t)

    [judgement] = sweeper(store, clock, reading(lease_lapses_meanwhile), lease_s=60).sweep()
    after = state(store, op)
    assert judgement.decision.verdict is Verdict.VERIFIED_NOT_APPLIED
    assert after.verdict == Verdict.VERIFIED_NOT_APPLIED.value
    assert (after.lease_holder, after.probe_count) == ("next-holder", 0)
