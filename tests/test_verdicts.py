"""SPEC section 4, rule by rule. Contract: 30 s visibility lag, 1 h key retention, 3 attempts,
10 min deadline, a provider that settles at once unless a test says otherwise (`inflight_s`).
Times are seconds after T0 (the intent)."""

from dataclasses import replace

from reconciler.core.domain import (
    Attempt,
    Authority,
    Decision,
    Effect,
    Evidence,
    Match,
    Observation,
    Outcome,
    ProviderContract,
    Verdict,
)
from reconciler.core.verdicts import Finding, NextAction, evaluate

from builders import (
    CONTRACT,
    OP,
    OTHER_HASH,
    approval,
    attempt,
    facts,
    intent,
    probe,
    receipt,
    resolution,
    t,
)

A, L, W, U = (Authority.AUTHORITATIVE, Authority.LAGGING, Authority.WEAK,
              Authority.UNAVAILABLE)


def judge(*items: Attempt | Evidence, effect: Effect = Effect.NON_IDEMPOTENT,
          contract: ProviderContract = CONTRACT, now: float = 100.0) -> Decision:
    return evaluate(facts(*items, effect=effect), contract, t(now))


# Rule 1 -------------------------------------------------------------------------------------

def test_rule1_two_refs_is_duplicate_effect() -> None:
    d = judge(attempt(1, 1), probe(10, A, "ch_1", "ch_2"))
    assert d.verdict is Verdict.DUPLICATE_EFFECT
    assert d.next_action == NextAction.COMPENSATE and not d.retry_allowed


def test_rule1_refs_are_never_forgotten() -> None:
    d = judge(attempt(1, 1), probe(10, L, "ch_1"), probe(50, A, "ch_2"), probe(60, A))
    assert d.verdict is Verdict.DUPLICATE_EFFECT
    assert Finding.CONFLICTING_EVIDENCE in d.findings


def test_rule1_weak_matches_do_not_count_as_refs() -> None:
    d = judge(attempt(1, 1), probe(10, A, "ch_1"), probe(20, W, "ch_2"))
    assert d.verdict is Verdict.VERIFIED_APPLIED
    assert Finding.WEAK_MATCH in d.findings


def test_rule1_duplicate_beats_unsafe_retry() -> None:
    d = judge(attempt(1, 1), attempt(2, 5, key="other"), probe(10, A, "ch_1", "ch_2"))
    assert d.verdict is Verdict.DUPLICATE_EFFECT
    assert {Finding.UNSAFE_RETRY, Finding.INCONSISTENT_ATTEMPT} <= set(d.findings)


# Rule 2 -------------------------------------------------------------------------------------

def test_rule2_changed_key_is_unsafe_retry() -> None:
    d = judge(attempt(1, 1), attempt(2, 5, key="key-1"))
    assert d.verdict is Verdict.UNSAFE_RETRY and d.next_action == NextAction.HALT
    assert Finding.INCONSISTENT_ATTEMPT in d.findings


def test_rule2_changed_hash_is_unsafe_retry() -> None:
    d = judge(attempt(1, 1, hash_=OTHER_HASH), effect=Effect.IDEMPOTENT_WRITE)
    assert d.verdict is Verdict.UNSAFE_RETRY


def test_rule2_blind_retry_of_non_idempotent_is_unsafe() -> None:
    d = judge(attempt(1, 1), attempt(2, 5))
    assert d.verdict is Verdict.UNSAFE_RETRY and Finding.BLIND_RETRY in d.findings


def test_rule2_retry_of_idempotent_write_with_same_key_is_not_blind() -> None:
    d = judge(attempt(1, 1), attempt(2, 5), effect=Effect.IDEMPOTENT_WRITE)
    assert d.verdict is Verdict.INDETERMINATE and Finding.BLIND_RETRY not in d.findings


def test_rule2_retry_after_verified_not_applied_is_not_blind() -> None:
    d = judge(attempt(1, 1), probe(10, A), attempt(2, 20), probe(30, A, "ch_1"))
    assert d.verdict is Verdict.VERIFIED_APPLIED and Finding.BLIND_RETRY not in d.findings


def test_rule2_retry_after_human_not_applied_is_not_blind() -> None:
    d = judge(attempt(1, 1), resolution(10, Verdict.VERIFIED_NOT_APPLIED), attempt(2, 20))
    assert Finding.BLIND_RETRY not in d.findings


def test_rule2_zero_in_the_same_instant_as_the_retry_does_not_open_it() -> None:
    d = judge(attempt(1, 1), probe(20, A), attempt(2, 20))
    assert d.verdict is Verdict.UNSAFE_RETRY and Finding.BLIND_RETRY in d.findings


def test_rule2_retry_after_key_retention_is_unsafe() -> None:
    d = judge(attempt(1, 1), attempt(2, 3602), effect=Effect.IDEMPOTENT_WRITE, now=4000)
    assert d.verdict is Verdict.UNSAFE_RETRY and Finding.RETRY_AFTER_RETENTION in d.findings


def test_rule2_more_attempts_than_max_is_unsafe() -> None:
    d = judge(attempt(1, 1), attempt(2, 2), attempt(3, 3), attempt(4, 4),
              effect=Effect.READ_ONLY)
    assert d.verdict is Verdict.UNSAFE_RETRY and Finding.ATTEMPTS_OVER_BUDGET in d.findings


def test_rule2_unsafe_retry_beats_false_success() -> None:
    d = judge(attempt(1, 1, Outcome.RESPONSE, status=200, key="x"), probe(10, A))
    assert d.verdict is Verdict.UNSAFE_RETRY and Finding.FALSE_SUCCESS in d.findings


# Rule 3 -------------------------------------------------------------------------------------

def test_rule3_success_response_and_conclusive_zero_is_false_success() -> None:
    d = judge(attempt(1, 1, Outcome.RESPONSE, status=201), probe(10, A))
    assert d.verdict is Verdict.FALSE_SUCCESS and d.next_action == NextAction.MARK_UNHEALTHY


def test_rule3_bound_receipt_and_conclusive_zero_is_false_success() -> None:
    d = judge(attempt(1, 1), receipt(5), probe(10, A))
    assert d.verdict is Verdict.FALSE_SUCCESS
    assert Finding.VERIFIED_APPLIED in d.findings


def test_rule3_error_response_is_not_a_success_claim() -> None:
    d = judge(attempt(1, 1, Outcome.RESPONSE, status=502), probe(10, A))
    assert d.verdict is Verdict.VERIFIED_NOT_APPLIED


# Rule 4 -------------------------------------------------------------------------------------

def test_rule4_zero_after_a_seen_effect_is_conflicting_evidence() -> None:
    d = judge(attempt(1, 1), probe(10, A, "ch_1"), probe(20, A))
    assert d.verdict is Verdict.INDETERMINATE
    assert Finding.CONFLICTING_EVIDENCE in d.findings and Finding.VERIFIED_APPLIED in d.findings


# Rule 5 -------------------------------------------------------------------------------------

def test_rule5_one_ref_is_verified_applied() -> None:
    d = judge(attempt(1, 1), probe(10, L, "ch_1"))
    assert d.verdict is Verdict.VERIFIED_APPLIED
    assert d.next_action == NextAction.USE_RECORDED_OUTCOME and not d.retry_allowed


def test_rule5_match_with_our_hash_is_verified_applied() -> None:
    d = judge(attempt(1, 1), probe(10, A, "ch_1", hash_=facts().intent.request_hash))
    assert d.verdict is Verdict.VERIFIED_APPLIED


def test_rule5_match_with_another_hash_falls_through() -> None:
    d = judge(attempt(1, 1), probe(10, A, "ch_1", hash_=OTHER_HASH))
    assert d.verdict is Verdict.INDETERMINATE
    assert Finding.EFFECT_HASH_MISMATCH in d.findings


def test_rule5_bound_receipt_is_verified_applied() -> None:
    d = judge(attempt(1, 1), receipt(5))
    assert d.verdict is Verdict.VERIFIED_APPLIED


def test_rule5_receipt_in_a_response_body_is_a_bound_receipt() -> None:
    d = judge(attempt(1, 1, Outcome.RESPONSE, status=200,
                      receipt=Match("ch_1", facts().intent.request_hash)))
    assert d.verdict is Verdict.VERIFIED_APPLIED


def test_rule7_receipt_bound_to_another_hash_proves_nothing() -> None:
    d = judge(attempt(1, 1), receipt(5, hash_=OTHER_HASH))
    assert d.verdict is Verdict.INDETERMINATE
    assert Finding.RECEIPT_HASH_MISMATCH in d.findings


def test_receipt_without_a_hash_is_unbound_but_no_hash_mismatch() -> None:
    d = judge(attempt(1, 1, Outcome.RESPONSE, status=200, receipt=Match("msg-1")))
    assert d.verdict is Verdict.INDETERMINATE
    assert Finding.RECEIPT_HASH_MISMATCH not in d.findings

# Rule 6 -------------------------------------------------------------------------------------

def test_rule6_authoritative_zero_after_dispatch_is_verified_not_applied() -> None:
    d = judge(attempt(1, 1), probe(2, A))
    assert d.verdict is Verdict.VERIFIED_NOT_APPLIED
    assert d.retry_allowed and d.next_action == NextAction.RETRY_SAME_KEY


def test_rule6_authoritative_zero_before_dispatch_is_not_conclusive() -> None:
    d = judge(probe(0.5, A), attempt(1, 1))
    assert d.verdict is Verdict.INDETERMINATE and Finding.ZERO_NOT_CONCLUSIVE in d.findings


def test_rule6_lagging_zero_inside_the_window_is_not_conclusive() -> None:
    d = judge(attempt(1, 1), probe(30.9, L))
    assert d.verdict is Verdict.INDETERMINATE and Finding.ZERO_NOT_CONCLUSIVE in d.findings


def test_rule6_lagging_zero_at_the_window_edge_is_conclusive() -> None:
    assert judge(attempt(1, 1), probe(31, L)).verdict is Verdict.VERIFIED_NOT_APPLIED


def test_rule6_zero_before_a_retry_says_nothing_about_the_retry() -> None:
    d = judge(attempt(1, 1), probe(5, A), attempt(2, 10), effect=Effect.IDEMPOTENT_WRITE)
    assert d.verdict is Verdict.INDETERMINATE


def test_rule6_only_the_latest_usable_observation_counts() -> None:
    d = judge(attempt(1, 1), probe(40, L), probe(45, L, "ch_1"))
    assert d.verdict is Verdict.VERIFIED_APPLIED


def test_rule6_unavailable_and_weak_after_a_zero_do_not_hide_it() -> None:
    d = judge(attempt(1, 1), probe(10, A), probe(20, U), probe(30, W))
    assert d.verdict is Verdict.VERIFIED_NOT_APPLIED
    assert Finding.PROBE_UNAVAILABLE in d.findings


def test_rule6_intent_without_attempt_is_measured_from_the_intent() -> None:
    assert judge(probe(1, A)).verdict is Verdict.VERIFIED_NOT_APPLIED


def test_rule6_no_retry_past_the_budget() -> None:
    d = judge(attempt(1, 1), probe(2, A), attempt(2, 3), probe(4, A), attempt(3, 5),
              probe(6, A))
    assert d.verdict is Verdict.VERIFIED_NOT_APPLIED and not d.retry_allowed
    assert Finding.RETRY_BUDGET_EXHAUSTED in d.findings and d.next_action == NextAction.ESCALATE


def test_rule6_no_retry_after_the_retention_window() -> None:
    d = judge(attempt(1, 1), probe(2, A), now=3602)
    assert not d.retry_allowed and Finding.RETENTION_WINDOW_CLOSED in d.findings


def test_rule6_not_compensable_needs_an_approval_after_the_dispatch() -> None:
    strict = replace(CONTRACT, compensable=False)
    waiting = judge(approval(0.5), attempt(1, 1), probe(2, A), contract=strict)
    assert not waiting.retry_allowed and waiting.next_action == NextAction.AWAIT_APPROVAL
    approved = judge(attempt(1, 1), probe(2, A), approval(3), contract=strict)
    assert approved.retry_allowed


# An attempt opened as dispatching (beyond SPEC: the two-phase attempt) -----------------------

def test_a_zero_read_before_the_outcome_came_in_raced_the_request() -> None:
    completed = replace(attempt(1, 1), recorded_at=t(1), completed_at=t(8))
    d = judge(completed, probe(5, A))
    assert d.verdict is Verdict.INDETERMINATE and Finding.ZERO_NOT_CONCLUSIVE in d.findings
    assert judge(completed, probe(5, A), probe(9, A)).verdict is Verdict.VERIFIED_NOT_APPLIED


def test_a_zero_while_the_attempt_is_open_waits_the_visibility_lag_whatever_its_authority() -> None:
    opened = attempt(1, 1, Outcome.DISPATCHING)
    d = judge(opened, probe(30.9, A))
    assert d.verdict is Verdict.INDETERMINATE and Finding.ZERO_NOT_CONCLUSIVE in d.findings
    assert judge(opened, probe(31, A)).verdict is Verdict.VERIFIED_NOT_APPLIED


def test_a_match_read_during_the_dispatch_still_proves_the_effect() -> None:
    opened = attempt(1, 1, Outcome.DISPATCHING)
    assert judge(opened, probe(2, A, "ch_1")).verdict is Verdict.VERIFIED_APPLIED


# Rule 7 -------------------------------------------------------------------------------------

def test_rule7_timeout_without_evidence_is_indeterminate() -> None:
    d = judge(attempt(1, 1))
    assert d.verdict is Verdict.INDETERMINATE and d.next_action == NextAction.RECONCILE


def test_rule7_weak_and_unavailable_only_is_indeterminate() -> None:
    d = judge(attempt(1, 1), probe(10, W, "ch_1"), probe(20, U))
    assert d.verdict is Verdict.INDETERMINATE


def test_rule7_past_the_deadline_escalates() -> None:
    d = judge(attempt(1, 1), now=601)
    assert d.verdict is Verdict.INDETERMINATE and d.next_action == NextAction.ESCALATE
    assert Finding.DEADLINE_PASSED in d.findings


# Human resolution ---------------------------------------------------------------------------

def test_resolution_after_the_latest_evidence_decides() -> None:
    d = judge(attempt(1, 1), probe(10, W, "ch_1"), resolution(20, Verdict.VERIFIED_APPLIED))
    assert d.verdict is Verdict.VERIFIED_APPLIED and Finding.HUMAN_RESOLUTION in d.findings


def test_resolution_before_newer_evidence_is_superseded() -> None:
    d = judge(attempt(1, 1), resolution(5, Verdict.VERIFIED_NOT_APPLIED), probe(10, A, "ch_1"))
    assert d.verdict is Verdict.VERIFIED_APPLIED
    assert Finding.RESOLUTION_SUPERSEDED in d.findings


def test_resolution_not_applied_opens_a_retry() -> None:
    d = judge(attempt(1, 1), resolution(5, Verdict.VERIFIED_NOT_APPLIED))
    assert d.verdict is Verdict.VERIFIED_NOT_APPLIED and d.retry_allowed


def test_human_resolution_stands_after_unavailable() -> None:
    """The reproduced double charge: an older zero, the human's "applied", a read outage."""
    d = judge(attempt(1, 1), probe(10, A), resolution(20, Verdict.VERIFIED_APPLIED),
              probe(30, U))
    assert d.verdict is Verdict.VERIFIED_APPLIED and not d.retry_allowed
    assert Finding.HUMAN_RESOLUTION in d.findings


def test_human_resolution_stands_after_weak_match() -> None:
    d = judge(attempt(1, 1), resolution(20, Verdict.VERIFIED_NOT_APPLIED), probe(30, W, "ch_1"))
    assert d.verdict is Verdict.VERIFIED_NOT_APPLIED and Finding.WEAK_MATCH in d.findings


def test_human_resolution_stands_after_inconclusive_zero() -> None:
    d = judge(attempt(1, 1), resolution(5, Verdict.VERIFIED_APPLIED), probe(10, L))
    assert d.verdict is Verdict.VERIFIED_APPLIED
    assert Finding.ZERO_NOT_CONCLUSIVE in d.findings


def test_human_resolution_later_means_recorded_later() -> None:
    # The match is stamped before the resolution but recorded after it: it supersedes.
    superseded = judge(attempt(1, 1), resolution(50, Verdict.VERIFIED_NOT_APPLIED),
                       probe(30, A, "ch_1"))
    assert superseded.verdict is Verdict.VERIFIED_APPLIED
    assert Finding.RESOLUTION_SUPERSEDED in superseded.findings
    # Stamped after the resolution but recorded before it: the human saw it; it decides.
    decided = judge(attempt(1, 1), probe(60, A, "ch_1"),
                    resolution(50, Verdict.VERIFIED_NOT_APPLIED))
    assert decided.verdict is Verdict.VERIFIED_NOT_APPLIED
    assert Finding.HUMAN_RESOLUTION in decided.findings


def test_human_resolution_superseded_by_later_proof() -> None:
    not_applied = resolution(5, Verdict.VERIFIED_NOT_APPLIED)
    by_receipt = judge(attempt(1, 1), not_applied, receipt(10))
    assert by_receipt.verdict is Verdict.VERIFIED_APPLIED
    by_attempt = judge(attempt(1, 1), not_applied, attempt(2, 10),
                       effect=Effect.IDEMPOTENT_WRITE)
    assert by_attempt.verdict is Verdict.INDETERMINATE and not by_attempt.retry_allowed
    by_zero = judge(attempt(1, 1), resolution(5, Verdict.VERIFIED_APPLIED), probe(10, A))
    for d in (by_receipt, by_attempt, by_zero):
        assert Finding.RESOLUTION_SUPERSEDED in d.findings


def test_human_applied_superseded_still_counts_against_zero() -> None:
    applied = resolution(5, Verdict.VERIFIED_APPLIED)
    d = judge(attempt(1, 1), applied, probe(10, A))
    assert d.verdict is Verdict.INDETERMINATE and not d.retry_allowed
    assert Finding.CONFLICTING_EVIDENCE in d.findings
    claimed = judge(attempt(1, 1, Outcome.RESPONSE, status=200), applied, probe(10, A))
    assert claimed.verdict is Verdict.INDETERMINATE
    assert Finding.FALSE_SUCCESS not in claimed.findings


def test_no_key_no_retry() -> None:
    keyless = replace(facts(attempt(1, 1, key=None), probe(10, A),
                            effect=Effect.IDEMPOTENT_WRITE), intent=intent(key=None))
    d = evaluate(keyless, CONTRACT, t(100))
    assert d.verdict is Verdict.VERIFIED_NOT_APPLIED and not d.retry_allowed
    assert Finding.INTENT_WITHOUT_KEY in d.findings and d.next_action == NextAction.ESCALATE


def test_max_attempts_counts_highest_attempt_number() -> None:
    gap = judge(attempt(1, 1), attempt(3, 5), probe(10, A), effect=Effect.IDEMPOTENT_WRITE)
    assert not gap.retry_allowed and Finding.RETRY_BUDGET_EXHAUSTED in gap.findings
    over = judge(attempt(1, 1), attempt(5, 5), effect=Effect.IDEMPOTENT_WRITE)
    assert over.verdict is Verdict.UNSAFE_RETRY and Finding.ATTEMPTS_OVER_BUDGET in over.findings


def test_retention_window_counts_from_earliest_dispatch() -> None:
    # Attempt 2 stamped before attempt 1 (a clock behind): the window opened at attempt 2.
    sent = (attempt(1, 600), attempt(2, 10), probe(700, A))
    assert judge(*sent, effect=Effect.IDEMPOTENT_WRITE, now=3610).retry_allowed
    closed = judge(*sent, effect=Effect.IDEMPOTENT_WRITE, now=3611)
    assert not closed.retry_allowed and Finding.RETENTION_WINDOW_CLOSED in closed.findings


def test_attempt_stamped_before_intent_counts_at_intent_time() -> None:
    late_intent = replace(intent(), at=t(10))
    early = replace(facts(attempt(1, 0), probe(5, A)), intent=late_intent)
    assert evaluate(early, CONTRACT, t(100)).verdict is Verdict.INDETERMINATE
    after = replace(facts(attempt(1, 0), probe(11, A)), intent=late_intent)
    assert evaluate(after, CONTRACT, t(100)).verdict is Verdict.VERIFIED_NOT_APPLIED


def test_errored_observation_counts_as_unavailable() -> None:
    errored_zero = Observation(OP, t(10), "probe", A, (), "HTTP 500")
    zero = judge(attempt(1, 1), errored_zero)
    assert zero.verdict is Verdict.INDETERMINATE and not zero.retry_allowed
    assert Finding.PROBE_UNAVAILABLE in zero.findings
    errored_match = Observation(OP, t(10), "probe", A, (Match("ch_1"),), "HTTP 500")
    assert judge(attempt(1, 1), errored_match).verdict is Verdict.INDETERMINATE


# Settle time (SPEC section 4) ---------------------------------------------------------------

SLOW = replace(CONTRACT, inflight_s=30)


def test_settle_time_a_zero_while_a_timed_out_attempt_may_still_be_applied_proves_nothing() -> None:
    d = judge(attempt(1, 1), probe(20, A), contract=SLOW)
    assert d.verdict is Verdict.INDETERMINATE and Finding.ZERO_NOT_CONCLUSIVE in d.findings
    assert judge(attempt(1, 1), probe(31.5, A), contract=SLOW).verdict is (
        Verdict.VERIFIED_NOT_APPLIED)


def test_settle_time_an_answer_below_500_settles_at_the_dispatch() -> None:
    for outcome, status in ((Outcome.RESPONSE, 409), (Outcome.NOT_SENT, None)):
        d = judge(attempt(1, 1, outcome, status=status), probe(2, A), contract=SLOW)
        assert d.verdict is Verdict.VERIFIED_NOT_APPLIED, outcome


def test_settle_time_a_5xx_or_no_outcome_yet_waits_inflight() -> None:
    for outcome, status in ((Outcome.RESPONSE, 502), (Outcome.DISPATCHING, None),
                            (Outcome.CONNECTION_ERROR, None)):
        d = judge(attempt(1, 1, outcome, status=status), probe(20, A), contract=SLOW)
        assert d.verdict is Verdict.INDETERMINATE, outcome


def test_settle_time_the_intent_alone_counts_as_a_dispatch_with_no_outcome() -> None:
    assert judge(probe(20, A), contract=SLOW).verdict is Verdict.INDETERMINATE
    assert judge(probe(31, A), contract=SLOW).verdict is Verdict.VERIFIED_NOT_APPLIED


def test_settle_time_a_lagging_zero_counts_the_lag_from_the_settle_time() -> None:
    # Settles at 31 s; the lag is 30 s: a lagging zero counts from 61 s.
    assert judge(attempt(1, 1), probe(60, L), contract=SLOW).verdict is Verdict.INDETERMINATE
    assert judge(attempt(1, 1), probe(61, L), contract=SLOW).verdict is (
        Verdict.VERIFIED_NOT_APPLIED)


def test_repeated_reports_a_late_2xx_after_a_timeout_is_a_success_claim() -> None:
    for reports in ((attempt(1, 1), attempt(1, 1, Outcome.RESPONSE, status=201)),
                    (attempt(1, 1, Outcome.RESPONSE, status=201), attempt(1, 1))):
        d = judge(*reports, probe(5, A), contract=SLOW)
        assert d.verdict is Verdict.FALSE_SUCCESS and not d.retry_allowed


def test_repeated_reports_count_one_attempt_against_the_budget() -> None:
    d = judge(attempt(1, 1), attempt(1, 1, Outcome.RESPONSE, status=400), probe(2, A),
              contract=replace(SLOW, max_attempts=2))
    assert d.verdict is Verdict.VERIFIED_NOT_APPLIED and d.retry_allowed


def test_rule2_a_retry_sent_without_a_live_grant_is_blind() -> None:
    ungranted = replace(attempt(2, 20), ungranted=True)
    # The zero before it would have allowed a retry: the send without the grant is blind all
    # the same (SPEC rule 6: "counts as dispatched while the verdict was not ...").
    d = judge(attempt(1, 1), probe(10, A), ungranted, now=30)
    assert d.verdict is Verdict.UNSAFE_RETRY and Finding.BLIND_RETRY in d.findings
    granted = judge(attempt(1, 1), probe(10, A), attempt(2, 20), now=30)
    assert granted.verdict is not Verdict.UNSAFE_RETRY


def test_human_resolution_an_attempt_reported_after_it_reopens_it_however_dated() -> None:
    human = replace(resolution(60, Verdict.VERIFIED_NOT_APPLIED), attempts_known=1)
    stands = judge(attempt(1, 1), human, now=70)
    assert stands.verdict is Verdict.VERIFIED_NOT_APPLIED
    reopened = judge(attempt(1, 1), human, attempt(2, 50), now=70)
    assert Finding.RESOLUTION_SUPERSEDED in reopened.findings
    assert reopened.verdict is Verdict.UNSAFE_RETRY


def test_probe_blind_an_empty_read_its_probe_could_not_see_by_proves_nothing() -> None:
    blind = replace(probe(20, U), error="probe_blind: scope: probe 'intents' does not cover "
                    "action 'charge'; its zero proves nothing")
    d = judge(attempt(1, 1), blind)
    assert d.verdict is Verdict.INDETERMINATE and not d.retry_allowed
    assert {Finding.PROBE_BLIND, Finding.PROBE_UNAVAILABLE} <= set(d.findings)
    assert Finding.PROBE_BLIND not in judge(attempt(1, 1), probe(20, U)).findings
