"""When the next probe round is due, and when a human is asked instead (reconciler.core.schedule):
one test per rule, on plain facts (summarized, as the stores hand them to the schedule)."""

from __future__ import annotations

from dataclasses import replace

from reconciler.core.domain import Authority, Decision, Effect, Facts, Outcome, Verdict
from reconciler.core.schedule import SweepPolicy, confirmation_due, due_after, next_round
from reconciler.core.summary import summarize
from reconciler.core.verdicts import evaluate

from builders import CONTRACT, attempt, facts, probe, receipt, resolution, t

POLICY = SweepPolicy(first_backoff_s=1.0, max_backoff_s=8.0, probe_budget=5)
LAG = CONTRACT.visibility_lag_s  # 30 s


def decided(f: Facts, at: float) -> Decision:
    return evaluate(f, CONTRACT, t(at))


def test_undecided_rounds_back_off_doubling_up_to_the_maximum() -> None:
    f = facts(attempt(1, 0), probe(100, Authority.UNAVAILABLE))
    due = [next_round(summarize(f), decided(f, 100), CONTRACT, n, t(100), POLICY).due_at
           for n in (1, 2, 3, 4)]
    assert due == [t(101), t(102), t(104), t(108)]


def test_an_undecided_round_is_never_later_than_the_end_of_the_visibility_window() -> None:
    f = facts(attempt(1, 0), probe(29, Authority.LAGGING))
    scheduled = next_round(summarize(f), decided(f, 29), CONTRACT, 4, t(29), POLICY)
    assert scheduled.due_at == t(LAG)


def test_the_deadline_escalates() -> None:
    f = facts(attempt(1, 0))
    scheduled = next_round(summarize(f), decided(f, 600), CONTRACT, 1, t(600), POLICY)
    assert (scheduled.due_at, scheduled.escalate) == (None, True)


def test_the_probe_budget_escalates() -> None:
    f = facts(attempt(1, 0))
    scheduled = next_round(summarize(f), decided(f, 50), CONTRACT, POLICY.probe_budget, t(50),
                           POLICY)
    assert (scheduled.due_at, scheduled.escalate) == (None, True)


def test_a_verified_not_applied_operation_is_not_probed_again() -> None:
    f = facts(attempt(1, 0), probe(10, Authority.AUTHORITATIVE))
    assert decided(f, 10).verdict is Verdict.VERIFIED_NOT_APPLIED
    assert next_round(summarize(f), decided(f, 10), CONTRACT, 1, t(10), POLICY).due_at is None
    assert due_after(summarize(f), decided(f, 10), CONTRACT) is None


def test_a_success_claim_is_confirmed_once_after_the_visibility_window() -> None:
    f = facts(attempt(1, 0, Outcome.RESPONSE, status=200), receipt(1))
    decision = decided(f, 1)
    assert decision.verdict is Verdict.VERIFIED_APPLIED
    assert due_after(summarize(f), decision, CONTRACT) == t(LAG)
    assert next_round(summarize(f), decision, CONTRACT, 1, t(1), POLICY).due_at == t(LAG)


def test_a_proving_read_after_the_window_is_the_confirmation() -> None:
    f = facts(attempt(1, 0), probe(LAG, Authority.LAGGING, "ch_1"))
    assert confirmation_due(summarize(f), decided(f, LAG), CONTRACT) is None


def test_a_receipt_a_probe_looked_up_after_the_window_is_the_confirmation() -> None:
    f = facts(attempt(1, 0, Outcome.RESPONSE, status=200), receipt(1), receipt(LAG))
    assert confirmation_due(summarize(f), decided(f, LAG), CONTRACT) is None
    told = facts(attempt(1, 0, Outcome.RESPONSE, status=200), receipt(1),
                 replace(receipt(LAG), source="webhook"))
    assert confirmation_due(summarize(told), decided(told, LAG), CONTRACT) == t(LAG)


def test_a_read_before_the_window_or_an_errored_one_is_no_confirmation() -> None:
    early = facts(attempt(1, 0), probe(5, Authority.LAGGING, "ch_1"))
    assert confirmation_due(summarize(early), decided(early, 5), CONTRACT) == t(LAG)
    errored = facts(attempt(1, 0), receipt(1), probe(40, Authority.UNAVAILABLE))
    assert confirmation_due(summarize(errored), decided(errored, 40), CONTRACT) == t(LAG)


def test_a_failed_confirmation_is_tried_again_within_the_budget_never_escalated() -> None:
    f = facts(attempt(1, 0), receipt(1), probe(40, Authority.UNAVAILABLE))
    again = next_round(summarize(f), decided(f, 40), CONTRACT, 2, t(40), POLICY)
    assert (again.due_at, again.escalate) == (t(42), False)
    spent = next_round(summarize(f), decided(f, 40), CONTRACT, POLICY.probe_budget, t(40), POLICY)
    assert (spent.due_at, spent.escalate) == (None, False)


def test_a_human_resolution_needs_no_confirmation() -> None:
    f = facts(attempt(1, 0), resolution(5, Verdict.VERIFIED_APPLIED))
    decision = decided(f, 5)
    assert decision.verdict is Verdict.VERIFIED_APPLIED
    assert confirmation_due(summarize(f), decision, CONTRACT) is None


def test_an_undecided_dispatched_operation_is_due_from_its_latest_dispatch() -> None:
    f = facts(attempt(1, 3), attempt(2, 9), effect=Effect.IDEMPOTENT_WRITE)
    assert due_after(summarize(f), decided(f, 10), CONTRACT) == t(9)
    assert due_after(summarize(facts()), decided(facts(), 10), CONTRACT) is None


def test_an_operation_stays_due_until_its_settle_time_has_passed() -> None:
    # A timeout at 0 settles at 20 s (inflight_s 20): the zero read at 2 s proves nothing, and
    # however far the backoff has grown the next round comes just after the settle time, where
    # a provider that committed late shows the effect.
    slow = replace(CONTRACT, inflight_s=20)
    f = facts(attempt(1, 0), probe(2, Authority.AUTHORITATIVE))
    decision = evaluate(f, slow, t(2))
    assert decision.verdict is Verdict.INDETERMINATE
    patient = replace(POLICY, max_backoff_s=300, probe_budget=20)  # round 6 would wait 32 s
    scheduled = next_round(summarize(f), decision, slow, 6, t(2), patient)
    assert scheduled.due_at is not None and t(20) < scheduled.due_at <= t(20.01)
