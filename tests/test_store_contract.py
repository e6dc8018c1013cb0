"""What every store promises (reconciler.core.ports): the same tests against the in-memory twin,
SQLite and PostgreSQL, so that replay and unit tests on the twin mean what they mean on a
database."""

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from reconciler.core.domain import (
    Authority,
    Decision,
    Effect,
    Evidence,
    Facts,
    Intent,
    IntentConflict,
    Observation,
    Outcome,
    ProviderContract,
    Verdict,
)
from reconciler.core.errors import (
    IntentConflictError,
    RetryNotGrantedError,
    UnknownOperationError,
)
from reconciler.core.ports import ERROR_CHARS, Delivery, Leases, Round, Scheduled, Store
from reconciler.core.summary import Summary, summarize
from reconciler.core.verdicts import decide
from reconciler.ledger import Ledger
from reconciler.store.kinds import leases_of
from reconciler.store.memory import MemoryStore
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore
from reconciler.testing import ManualClock

from builders import CONTRACT, H0, K0, OP, T0, attempt, intent, probe, receipt, resolution, t


@pytest.fixture
def leases(store: Store) -> Leases:
    return leases_of(store)


def op_intent(op: str, at: float = 0) -> Intent:
    return replace(intent(), operation_id=op, at=t(at))


def dispatched(store: Store, *ops: str) -> None:
    store.put_contract(CONTRACT)
    for op in ops:
        store.record_intent(op_intent(op))
        store.record_attempt(replace(attempt(1, 1), operation_id=op))


def decided(summary: Summary, contract: ProviderContract, now: datetime) -> Scheduled:
    """A rule for recorded facts that schedules nothing."""
    return Scheduled(decide(summary, contract, now), None)


def confirm_at_200(summary: Summary, contract: ProviderContract, now: datetime) -> Scheduled:
    return Scheduled(decide(summary, contract, now), t(200))


def still_open(summary: Summary, contract: ProviderContract, number: int) -> Scheduled:
    """A round rule that decides indeterminate and asks for the next round in 10 s."""
    return Scheduled(decide(summary, contract, t(100)), t(110), escalate=False)


def escalating(summary: Summary, contract: ProviderContract, number: int) -> Scheduled:
    return Scheduled(decide(summary, contract, t(100)), None, escalate=True)


# -- recording ------------------------------------------------------------------------------


def test_recording_an_intent_twice_is_an_idempotent_repeat(store: Store) -> None:
    assert store.record_intent(intent()) is True
    assert store.record_intent(intent()) is False
    assert store.facts(OP).intent == intent()


@pytest.mark.parametrize("changed", [
    {"request_hash": "sha256:" + "b" * 64}, {"idempotency_key": "key-9"},
    {"effect": Effect.READ_ONLY}])
def test_a_different_intent_for_an_existing_id_is_refused_and_recorded(
        store: Store, changed: dict[str, object]) -> None:
    store.record_intent(intent())
    other = replace(intent(), **changed)  # type: ignore[arg-type]
    with pytest.raises(IntentConflictError) as err:
        store.record_intent(other)
    assert err.value.operation_id == OP
    facts = store.facts(OP)
    assert facts.intent == intent()
    assert [type(e) for e in facts.evidence] == [IntentConflict]


def test_an_identical_repeat_of_an_attempt_is_not_new(store: Store) -> None:
    store.record_intent(intent())
    assert store.record_attempt(attempt(1, 1)) is True
    assert store.record_attempt(attempt(1, 1)) is False
    assert store.facts(OP).attempts == (attempt(1, 1),)


def test_an_attempt_keeps_the_sidecars_time_beside_the_claimed_one(store: Store) -> None:
    store.record_intent(intent())
    stamped = replace(attempt(1, 1), recorded_at=t(3))
    assert store.record_attempt(stamped) is True
    assert store.facts(OP).attempts == (stamped,)
    # Reported again, recorded at another time: the same attempt.
    assert store.record_attempt(replace(stamped, recorded_at=t(4))) is False
    assert store.facts(OP).attempts[0].recorded_at == t(3)


def test_an_open_attempt_is_completed_once_with_its_outcome(store: Store) -> None:
    store.record_intent(intent())
    opened_at = replace(attempt(1, 1, Outcome.DISPATCHING), recorded_at=t(1))
    assert store.record_attempt(opened_at) is True
    done = replace(attempt(1, 5, Outcome.RESPONSE, status=201), recorded_at=t(6))
    assert store.record_attempt(done) is True
    [completed] = store.facts(OP).attempts
    # The outcome is the completion's; the dispatch times stay the opening's, and the
    # completion's own recording time is kept beside them.
    assert (completed.outcome, completed.status, completed.at, completed.recorded_at,
            completed.completed_at) == (Outcome.RESPONSE, 201, t(1), t(1), t(6))
    assert store.record_attempt(replace(completed, recorded_at=t(9))) is False
    # Once closed, another outcome for it is another report, kept beside the completed one.
    assert store.record_attempt(attempt(1, 5, Outcome.TIMEOUT)) is True
    assert [a.outcome for a in store.facts(OP).attempts] == [Outcome.RESPONSE, Outcome.TIMEOUT]


def test_evidence_keeps_the_sidecars_time_beside_the_claimed_one(store: Store) -> None:
    store.record_intent(intent())
    items: list[Evidence] = [replace(probe(30), recorded_at=t(31)),
                             replace(receipt(10), recorded_at=t(32))]
    for item in items:
        store.record_evidence(item)
    assert list(store.facts(OP).evidence) == items


def test_attempts_and_their_reports_come_back_in_recorded_order(store: Store) -> None:
    store.record_intent(intent())
    store.record_attempt(attempt(2, 5))
    store.record_attempt(attempt(1, 1))
    store.record_attempt(attempt(2, 5, Outcome.RESPONSE, status=200))
    assert [(a.number, a.outcome) for a in store.facts(OP).attempts] == [
        (2, Outcome.TIMEOUT), (1, Outcome.TIMEOUT), (2, Outcome.RESPONSE)]


def test_facts_and_evidence_for_an_unknown_operation_are_an_error(store: Store) -> None:
    with pytest.raises(UnknownOperationError):
        store.facts("nope")
    with pytest.raises(UnknownOperationError):
        store.record_evidence(receipt(1))
    with pytest.raises(UnknownOperationError):
        store.record_attempt(attempt(1, 1))


def test_evidence_is_kept_in_recorded_order_with_every_field(store: Store) -> None:
    store.record_intent(intent())
    items: list[Evidence] = [probe(30, Authority.LAGGING, "ch_2", hash_=H0), receipt(10),
                             probe(20, Authority.UNAVAILABLE),
                             resolution(40, Verdict.VERIFIED_APPLIED)]
    for item in items:
        store.record_evidence(item)
    assert list(store.facts(OP).evidence) == items


def test_an_observations_error_is_kept_to_its_first_characters(store: Store) -> None:
    store.record_intent(intent())
    store.record_evidence(Observation(OP, t(5), "probe", Authority.UNAVAILABLE, (), "x" * 2000))
    [kept] = store.facts(OP).evidence
    assert isinstance(kept, Observation) and kept.error == "x" * ERROR_CHARS


def test_unconfigured_provider_gets_the_cautious_default_contract(store: Store) -> None:
    assert store.contract("unknown") == ProviderContract(name="unknown")
    configured = ProviderContract(name="pay", idempotency_keys=True, max_attempts=5)
    store.put_contract(configured)
    assert store.contract("pay") == configured


# -- deciding and listing -------------------------------------------------------------------


def test_deciding_caches_the_verdict_and_its_time_only_when_it_changes(store: Store) -> None:
    store.put_contract(CONTRACT)
    store.record_intent(intent())
    store.decide(OP, decided, t(1))
    [first] = store.list_operations()
    assert (first.verdict, first.updated_at) == ("indeterminate", T0)
    store.record_evidence(receipt(10))
    result = store.decide(OP, decided, t(11))
    assert result.decision.verdict is Verdict.VERIFIED_APPLIED and not result.escalated
    assert len(result.facts.evidence) == 1
    store.decide(OP, decided, t(50))
    [cached] = store.list_operations()
    assert (cached.verdict, cached.next_action, cached.updated_at) == (
        "verified_applied", "use_recorded_outcome", t(11))


def test_a_decision_keeps_the_facts_it_was_drawn_from_whatever_is_recorded_after(
        store: Store) -> None:
    """A store may hand the facts over read on demand (ports.Decided.snapshot): read late,
    they are still those of the decision."""
    store.put_contract(CONTRACT)
    store.record_intent(intent())
    store.record_attempt(attempt(1, 1))
    result = store.decide(OP, decided, t(2))
    store.record_evidence(receipt(10))
    store.record_attempt(attempt(2, 11))
    assert result.facts == Facts(intent(), (attempt(1, 1),), ())
    assert len(store.decide(OP, decided, t(12)).facts.evidence) == 1


def test_list_operations_filters_by_verdict_and_pages_by_cursor(store: Store) -> None:
    ledger = Ledger(store, clock=ManualClock(t(1)))
    for n in range(5):
        ledger.record_intent(Intent(f"op-{n}", H0, K0, "pay", "charge", Effect.READ_ONLY, T0))
    page = store.list_operations(verdict="indeterminate", limit=2)
    assert [o.operation_id for o in page] == ["op-0", "op-1"]
    rest = store.list_operations(verdict="indeterminate", after="op-1", limit=10)
    assert [o.operation_id for o in rest] == ["op-2", "op-3", "op-4"]
    assert store.list_operations(verdict="verified_applied") == []
    assert store.list_operations(escalated=True) == []


def test_the_providers_of_stored_operations_are_listed_by_verdict(store: Store) -> None:
    ledger = Ledger(store)
    ledger.record_intent(intent())
    ledger.record_intent(replace(intent(), operation_id="op-2", provider="mail"))
    assert store.providers() == {"pay", "mail"}
    assert store.providers(verdict="indeterminate") == {"pay", "mail"}
    assert store.providers(verdict="verified_applied") == set()


def test_deciding_tells_whether_the_verdict_changed(store: Store) -> None:
    store.put_contract(CONTRACT)
    store.record_intent(intent())
    assert store.decide(OP, decided, t(1)).changed is False  # indeterminate, as recorded
    store.record_evidence(receipt(10))
    assert store.decide(OP, decided, t(11)).changed is True
    assert store.decide(OP, decided, t(12)).changed is False  # read again: no transition


def _needing_humans(store: Store, leases: Leases) -> None:
    """op-esc escalated by a sweeper, op-late past its deadline, op-dup two effects, op-ok
    settled."""
    dispatched(store, "op-esc", "op-late", "op-dup", "op-ok")
    assert leases.claim("op-esc", "s1", t(3), 60)
    leases.close_rounds("s1", [Round(op_intent("op-esc"), [])], escalating, t(4))
    store.decide("op-late", decided, t(700))
    store.record_evidence(replace(probe(5, Authority.AUTHORITATIVE, "ch_1", "ch_2"),
                                  operation_id="op-dup"))
    store.decide("op-dup", decided, t(6))
    store.record_evidence(replace(receipt(7), operation_id="op-ok"))
    store.decide("op-ok", decided, t(8))


def test_escalated_means_a_human_must_act_and_says_why(store: Store, leases: Leases) -> None:
    _needing_humans(store, leases)
    acting = store.list_operations(escalated=True)
    assert [(o.operation_id, o.reason) for o in acting] == [
        ("op-esc", "escalated"), ("op-late", "escalate_to_human")]
    assert [o.operation_id for o in store.list_operations(escalated=False)] == ["op-dup",
                                                                                "op-ok"]
    store.record_evidence(replace(resolution(9, Verdict.VERIFIED_APPLIED),
                                  operation_id="op-esc"))
    store.decide("op-esc", decided, t(10))
    # Resolved: escalated still, but nothing waits on a human any more.
    assert [o.operation_id for o in store.list_operations(escalated=True)] == ["op-late"]


def test_attention_lists_everything_a_human_should_look_at(store: Store,
                                                           leases: Leases) -> None:
    _needing_humans(store, leases)
    looking = store.list_operations(attention=True)
    assert [(o.operation_id, o.reason) for o in looking] == [
        ("op-dup", "duplicate_effect"), ("op-esc", "escalated"),
        ("op-late", "escalate_to_human")]
    assert [o.reason for o in store.list_operations(attention=False)] == [None]
    assert store.list_operations(provider="other") == []
    assert len(store.list_operations(provider="pay", attention=True, limit=2)) == 2


def test_waiting_on_human_counts_by_reason_since_the_oldest(store: Store,
                                                            leases: Leases) -> None:
    _needing_humans(store, leases)
    waiting = {(w.reason, w.count, w.oldest) for w in store.waiting_on_human()}
    assert waiting == {("escalated", 1, T0), ("escalate_to_human", 1, t(700)),
                       ("duplicate_effect", 1, t(6))}


def test_remove_settled_removes_what_the_rule_allows_with_its_facts(store: Store) -> None:
    store.put_contract(CONTRACT)
    for op in ("op-a", "op-b", "op-c"):
        store.record_intent(op_intent(op))
        store.record_evidence(replace(receipt(1), operation_id=op))
        store.decide(op, decided, t(2))
    store.record_intent(op_intent("op-open"))
    seen: list[str] = []

    def all_but_b(facts: object, contract: ProviderContract, now: object) -> bool:
        op = facts.intent.operation_id  # type: ignore[attr-defined]
        seen.append(op)
        return bool(op != "op-b")

    removed, cursor = store.remove_settled(t(3), t(10), all_but_b, limit=2)
    assert [f.intent.operation_id for f in removed] == ["op-a"] and cursor == "op-b"
    assert len(removed[0].evidence) == 1
    removed, cursor = store.remove_settled(t(3), t(10), all_but_b, after=cursor, limit=2)
    assert [f.intent.operation_id for f in removed] == ["op-c"] and cursor is None
    assert seen == ["op-a", "op-b", "op-c"]  # never the undecided one
    assert [o.operation_id for o in store.list_operations()] == ["op-b", "op-open"]
    with pytest.raises(UnknownOperationError):
        store.facts("op-a")
    assert store.remove_settled(t(2), t(10), all_but_b) == ([], None)  # decided at t(2)


def test_a_store_answers_ready(store: Store) -> None:
    store.ready()


# -- leases and the probe schedule ----------------------------------------------------------


def test_only_dispatched_undecided_operations_are_claimed_oldest_first(
        store: Store, leases: Leases) -> None:
    store.record_intent(op_intent("never-sent"))
    dispatched(store, "op-a", "op-b")
    _, claimed = leases.close_rounds("s1", [], still_open, t(2), claim=10, lease_s=60)
    assert sorted(i.operation_id for i in claimed) == ["op-a", "op-b"]
    _, again = leases.close_rounds("s2", [], still_open, t(3), claim=10, lease_s=60)
    assert again == []  # leased to s1


def test_a_claim_takes_no_more_than_asked(store: Store, leases: Leases) -> None:
    dispatched(store, "op-a", "op-b", "op-c")
    _, claimed = leases.close_rounds("s1", [], still_open, t(2), claim=2, lease_s=60)
    assert len(claimed) == 2


def test_concluding_a_round_records_decides_schedules_and_releases(
        store: Store, leases: Leases) -> None:
    dispatched(store, OP)
    _, [claimed] = leases.close_rounds("s1", [], still_open, t(2), claim=1, lease_s=60)
    seen = probe(50, Authority.UNAVAILABLE)
    [done], _ = leases.close_rounds("s1", [Round(claimed, [seen])], still_open, t(100))
    assert done.facts.evidence == (seen,) and not done.escalate
    assert store.facts(OP).evidence == (seen,)
    # Not due before the scheduled time, due after it, to anyone (the lease was released).
    assert leases.close_rounds("s2", [], still_open, t(105), claim=1, lease_s=60)[1] == []
    assert [i.operation_id for i in leases.close_rounds(
        "s2", [], still_open, t(111), claim=1, lease_s=60)[1]] == [OP]


def test_an_escalated_operation_is_never_claimed_again(store: Store, leases: Leases) -> None:
    dispatched(store, OP)
    _, [claimed] = leases.close_rounds("s1", [], still_open, t(2), claim=1, lease_s=60)
    [done], _ = leases.close_rounds("s1", [Round(claimed, [])], escalating, t(100))
    assert done.escalate and not done.was_escalated
    assert store.decide(OP, decided, t(200)).escalated is True
    assert leases.close_rounds("s2", [], still_open, t(10_000), claim=1, lease_s=60)[1] == []
    assert [o.operation_id for o in store.list_operations(escalated=True)] == [OP]


def test_a_round_whose_lease_was_taken_over_records_but_leaves_the_schedule(
        store: Store, leases: Leases) -> None:
    dispatched(store, OP)
    _, [claimed] = leases.close_rounds("s1", [], still_open, t(2), claim=1, lease_s=10)
    assert leases.claim(OP, "s2", t(20), 60)  # s1's lease lapsed at t(12)
    leases.close_rounds("s1", [Round(claimed, [probe(21)])], escalating, t(21))
    assert len(store.facts(OP).evidence) == 1
    assert store.decide(OP, decided, t(22)).escalated is False  # s1 could not escalate
    assert not leases.claim(OP, "s3", t(30), 60)  # s2 still holds it


def test_a_probe_lease_is_held_by_one_holder_until_it_lapses(
        store: Store, leases: Leases) -> None:
    dispatched(store, OP)
    assert leases.claim(OP, "s1", t(2), 10)
    assert leases.claim(OP, "s1", t(3), 10)  # renewed by its holder
    assert not leases.claim(OP, "s2", t(4), 10)
    assert leases.claim(OP, "s2", t(14), 10)
    assert not leases.claim("nope", "s1", t(2), 10)


def test_abandoned_rounds_are_counted_and_due_again_at_once(
        store: Store, leases: Leases) -> None:
    dispatched(store, OP)
    leases.close_rounds("s1", [], still_open, t(2), claim=1, lease_s=60)
    leases.abandon([OP], "s1", t(2))
    assert [i.operation_id for i in leases.close_rounds(
        "s2", [], still_open, t(3), claim=1, lease_s=60)[1]] == [OP]


def test_release_all_gives_up_every_lease_of_one_holder(store: Store, leases: Leases) -> None:
    dispatched(store, "op-a", "op-b")
    leases.close_rounds("s1", [], still_open, t(2), claim=2, lease_s=60)
    assert leases.release_all("s1") == 2
    assert leases.release_all("s1") == 0
    assert len(leases.close_rounds("s2", [], still_open, t(3), claim=2, lease_s=60)[1]) == 2


def test_the_oldest_due_operation_says_how_long_it_has_waited(
        store: Store, leases: Leases) -> None:
    assert leases.oldest_due(t(0)) is None
    dispatched(store, OP)
    assert leases.oldest_due(t(5)) == t(1)  # due since its first dispatch


def test_a_first_dispatch_makes_an_undecided_operation_due_at_its_time(
        store: Store, leases: Leases) -> None:
    store.record_intent(intent())
    assert leases.oldest_due(t(100)) is None  # nothing sent: nothing to probe
    store.record_attempt(attempt(1, 3))
    store.record_attempt(attempt(2, 9))
    assert leases.oldest_due(t(100)) == t(3)


def test_a_changed_verdict_keeps_the_schedule_its_rule_gives(
        store: Store, leases: Leases) -> None:
    dispatched(store, OP)
    store.record_evidence(receipt(10))
    store.decide(OP, confirm_at_200, t(11))  # verified_applied: a confirmation round at t(200)
    assert leases.oldest_due(t(199)) is None
    assert leases.oldest_due(t(200)) == t(200)
    store.decide(OP, decided, t(12))  # the same verdict: the schedule is not touched
    assert leases.oldest_due(t(200)) == t(200)


def test_a_retry_lease_is_granted_to_one_holder_at_a_time(store: Store, leases: Leases) -> None:
    dispatched(store, OP)
    expires = leases.acquire_retry(OP, "w1", t(2), 30)
    assert expires == t(2) + timedelta(seconds=30)
    assert leases.acquire_retry(OP, "w2", t(3), 30) is None
    assert leases.acquire_retry(OP, "w1", t(4), 30) == t(34)  # renewed
    assert leases.acquire_retry(OP, "w2", t(35), 30) == t(65)  # lapsed, taken over


def test_a_retry_grant_names_its_holder_and_attempt_until_it_lapses(
        store: Store, leases: Leases) -> None:
    dispatched(store, OP)
    assert leases.retry_grant(OP, t(2)) is None
    leases.acquire_retry(OP, "w1", t(2), 30, 2)
    assert leases.retry_grant(OP, t(10)) == ("w1", 2)
    assert leases.retry_grant(OP, t(33)) is None  # lapsed


def test_a_retry_grant_is_given_with_the_decision_it_was_given_on(
        store: Store, leases: Leases) -> None:
    dispatched(store, OP)
    seen: list[tuple[int, str]] = []

    def refuse(facts: Facts, decision: Decision) -> int | None:
        seen.append((len(facts.attempts), decision.verdict.value))
        return None

    decided_then, expires = leases.grant_retry(OP, "w1", decided, refuse, t(2), 30)
    assert expires is None and leases.retry_grant(OP, t(3)) is None  # nothing granted
    assert seen == [(1, decided_then.decision.verdict.value)]
    _, expires = leases.grant_retry(OP, "w1", decided, lambda f, d: 2, t(4), 30)
    assert expires == t(34) and leases.retry_grant(OP, t(5)) == ("w1", 2)
    _, taken = leases.grant_retry(OP, "w2", decided, lambda f, d: 2, t(6), 30)
    assert taken is None and leases.retry_grant(OP, t(7)) == ("w1", 2)  # one holder


def test_an_opening_attempt_is_recorded_only_under_its_holders_unexpired_grant(
        store: Store, leases: Leases) -> None:
    dispatched(store, OP)
    store.record_evidence(probe(3))  # verified_not_applied: what a grant rests on
    opening = replace(attempt(2, 5, Outcome.DISPATCHING), recorded_at=t(5))

    def refused(holder: str | None, now: datetime) -> None:
        with pytest.raises(RetryNotGrantedError):
            leases.record_granted_attempt(opening, holder, decided, now)
        assert [a.number for a in store.facts(OP).attempts] == [1]  # nothing recorded

    refused("w2", t(5))  # nobody asked
    leases.acquire_retry(OP, "w2", t(2), 30, 3)
    refused("w2", t(5))  # a grant for another number
    leases.acquire_retry(OP, "w2", t(2), 30, 2)
    refused("w1", t(5))  # another's grant
    refused(None, t(5))  # no holder named
    refused("w2", t(40))  # lapsed at t(32)
    with pytest.raises(UnknownOperationError):
        leases.record_granted_attempt(replace(opening, operation_id="nope"), "w2", decided,
                                      t(5))
    leases.acquire_retry(OP, "w2", t(41), 30, 2)
    created, now_decided = leases.record_granted_attempt(opening, "w2", decided, t(42))
    assert created is True and [a.number for a in now_decided.facts.attempts] == [1, 2]
    assert now_decided.decision == decide(summarize(store.facts(OP)), CONTRACT, t(42))
    # Its repeat needs the same live grant (SPEC rule 6: a caller without it must not send);
    # its completion needs none, even once the grant has lapsed.
    again, _ = leases.record_granted_attempt(opening, "w2", decided, t(43))
    assert again is False
    with pytest.raises(RetryNotGrantedError):
        leases.record_granted_attempt(opening, None, decided, t(44))
    done = replace(attempt(2, 5, Outcome.RESPONSE, status=200), recorded_at=t(101))
    completed, then = leases.record_granted_attempt(done, "w9", decided, t(101))
    assert completed is True and then.facts.attempts[-1].outcome is Outcome.RESPONSE
    # Another report of the attempt needs no grant either: it is kept, not refused.
    kept, after = leases.record_granted_attempt(replace(done, status=500), None, decided, t(102))
    assert kept is True and [a.status for a in after.facts.attempts] == [None, 200, 500]


def test_an_attempt_is_recorded_with_the_decision_it_leads_to(store: Store) -> None:
    store.put_contract(CONTRACT)
    store.record_intent(intent())
    created, decided_now = store.record_attempt_and_decide(attempt(1, 1), decided, t(2))
    assert created is True
    assert [a.number for a in decided_now.facts.attempts] == [1]
    assert decided_now.decision == decide(summarize(store.facts(OP)), CONTRACT, t(2))
    again, decided_again = store.record_attempt_and_decide(attempt(1, 1), decided, t(3))
    assert again is False and decided_again.changed is False
    late, decided_late = store.record_attempt_and_decide(
        attempt(1, 1, Outcome.RESPONSE, status=200), decided, t(4))
    assert late is True and len(decided_late.facts.attempts) == 2
    assert decided_late.decision == decide(summarize(store.facts(OP)), CONTRACT, t(4))
    with pytest.raises(UnknownOperationError):
        store.record_attempt_and_decide(replace(attempt(1, 1), operation_id="nope"), decided,
                                        t(5))


def test_the_memory_twin_and_a_database_agree_on_a_whole_replay(tmp_path: Path) -> None:
    """The store-level promises add up: one fixture's facts give one verdict on both."""
    verdicts = []
    for store in (MemoryStore(), open_store(f"sqlite:///{tmp_path / 'r.db'}")):
        clock = ManualClock(t(0))  # the sidecar's clock, as each fact arrives: it stamps them all
        ledger = Ledger(store, clock=clock)
        store.put_contract(CONTRACT)
        ledger.record_intent(intent())
        clock.set(t(1))
        ledger.record_attempt(attempt(1, 1))
        clock.set(t(100))
        ledger.record_evidence(probe(100, Authority.AUTHORITATIVE))
        verdicts.append(ledger.judge(OP, t(200)).decision)
        if isinstance(store, SqlStore):
            store.engine.dispose()
    assert verdicts[0] == verdicts[1]
    assert verdicts[0].verdict is Verdict.VERIFIED_NOT_APPLIED


# -- webhook deliveries ---------------------------------------------------------------------

WINDOW = timedelta(minutes=11)


def test_a_delivery_id_is_accepted_once(store: Store) -> None:
    delivery = Delivery("stripe", "evt_1", t(0), WINDOW)
    assert store.record_delivery(delivery, None) is True
    assert store.record_delivery(delivery, None) is False
    assert store.record_delivery(Delivery("github", "evt_1", t(0), None), None) is True


def test_a_delivery_is_kept_with_its_receipt_or_not_at_all(store: Store) -> None:
    store.record_intent(intent())
    with pytest.raises(UnknownOperationError):
        store.record_delivery(Delivery("stripe", "evt_1", t(0), WINDOW),
                              replace(receipt(0), operation_id="no-such-op"))
    assert store.record_delivery(Delivery("stripe", "evt_1", t(0), WINDOW), receipt(0)) is True
    assert list(store.facts(OP).evidence) == [receipt(0)]


def test_timestamped_delivery_ids_age_out_after_their_window_and_unsigned_ones_stay(
        store: Store) -> None:
    old, now = t(0), t(0) + WINDOW + timedelta(seconds=1)
    store.record_delivery(Delivery("stripe", "evt_old", old, WINDOW), None)
    store.record_delivery(Delivery("github", "guid-old", old, None), None)
    store.record_delivery(Delivery("stripe", "evt_recent", now - WINDOW / 2, WINDOW), None)
    store.record_delivery(Delivery("stripe", "evt_new", now, WINDOW), None)
    assert store.record_delivery(Delivery("stripe", "evt_old", now, WINDOW), None) is True
    assert store.record_delivery(Delivery("github", "guid-old", now, None), None) is False
    assert store.record_delivery(Delivery("stripe", "evt_recent", now, WINDOW), None) is False


def test_an_attempt_still_dispatching_is_due_only_later_and_its_outcome_makes_it_due(
        store: Store, leases: Leases) -> None:
    store.record_intent(intent())
    opening = replace(attempt(1, 3), outcome=Outcome.DISPATCHING)
    store.record_attempt(opening, due_at=t(63))
    assert leases.oldest_due(t(62)) is None  # in flight: not probed yet
    store.record_attempt(replace(opening, outcome=Outcome.TIMEOUT), due_at=t(3))
    assert leases.oldest_due(t(4)) == t(3)


def test_a_provider_filter_pages_in_id_order_from_the_cursor(store: Store,
                                                            leases: Leases) -> None:
    _needing_humans(store, leases)
    every = [o.operation_id for o in store.list_operations(provider="pay")]
    assert every == sorted(every) and len(every) == 4
    first = store.list_operations(provider="pay", limit=2)
    rest = store.list_operations(provider="pay", after=first[-1].operation_id)
    assert [o.operation_id for o in first + rest] == every
