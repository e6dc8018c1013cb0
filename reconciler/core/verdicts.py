"""The verdict engine: SPEC section 4 as plain functions over plain data. No I/O, no clock reads.

Read it beside the SPEC: `decide` walks rules 1 to 7 in order, the first rule that holds is the
verdict, and every rule that holds is listed in the findings. A human resolution decides the
verdict until later proof supersedes it; the rules still report what they see. The rules read
an operation's facts through their `Summary` (reconciler.core.summary: the facts folded one at a
time, so that a store deciding after each new fact pays the same whatever the history);
`evaluate(facts)` is `decide(summarize(facts))`.

The readings SPEC section 4 fixes, so that an error of a clock or of a probe never opens a
retry early, and where they are applied:
- an observation that carries an `error` counts as `unavailable`, whatever authority it names
  (`summary.authority_of`);
- a zero counts from the latest settle time, not the latest dispatch (`Summary.latest_settle`);
- the latest dispatch is the latest of the intent's time and every attempt's, and an attempt
  stamped before its intent counts at the intent's time (`summary.dispatched_at`,
  `Summary.latest_dispatch`); the retention window counts from the earliest dispatch
  (`Summary.earliest_dispatch`);
- `max_attempts` holds against the highest attempt number as well as the count
  (`Summary.attempts_used`);
- a human resolution stands until later proof: a later attempt, receipt, authoritative or
  lagging match, or conclusive zero; a weak or unavailable observation or an inconclusive zero
  never supersedes it (`_deciding_resolution`), and a superseded `verified_applied` still
  counts against a zero (rules 3, 4 and 6 treat it as an effect seen);
- a retry with "the same key" needs a key: an intent without one is never granted a retry.
Rounding where precision is cut (a dispatch up, an observation down) happens where the times
are read, in `reconciler.cli.fixtures`; this module compares times as given.

Where the SPEC still leaves a choice, this module takes the reading that can never cause a
second real-world effect: a zero at the very instant of a dispatch is not after it; a refused
retry request counts as an unsafe one; and a retry is granted only by a provider with
idempotency keys, and only when nothing in rule 2 holds. Attempts and evidence are recorded
apart, so an attempt is weighed against a human resolution by the number of attempt reports
the ledger stamped on the resolution (`Resolution.attempts_known`) and by its dispatch time:
later when either says so.

Settle time (SPEC section 4) and repeated reports: `Summary.latest_settle` is the latest
dispatch, or a dispatch that no report has settled plus the provider's `inflight_s`; a zero is
weighed against it (`is_conclusive_zero`), so a zero read while the provider may still be
applying a request proves nothing about that request. Every report of an attempt is folded: a
2xx in any is a success claim, one answer below 500 settles it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice

from reconciler.core.domain import (
    Authority,
    Decision,
    Effect,
    Facts,
    Intent,
    Observation,
    ProviderContract,
    Resolution,
    Verdict,
)
from reconciler.core.sight import PROBE_BLIND
from reconciler.core.summary import PROOF_AUTHORITIES, Summary, authority_of, summarize


class Finding:
    """Names of the facts the engine reports. Stable: fixtures and clients match on them."""

    #: Rule 1: two or more distinct provider refs from authoritative or lagging probes.
    DUPLICATE_EFFECT = "duplicate_effect"
    #: Rule 2 holds (one or more of the four findings below says why).
    UNSAFE_RETRY = "unsafe_retry"
    #: Rule 2: an attempt used another idempotency key or request hash than the intent.
    INCONSISTENT_ATTEMPT = "inconsistent_attempt"
    #: Rule 2: attempt n>=2 of a non_idempotent action sent while not verified_not_applied.
    BLIND_RETRY = "blind_retry"
    #: Rule 2: a retry sent more than key_retention_s after the first attempt.
    RETRY_AFTER_RETENTION = "retry_after_retention"
    #: Rule 2: more attempts than the contract's max_attempts (the first one counts; so does
    #: every number skipped below the highest one recorded).
    ATTEMPTS_OVER_BUDGET = "attempts_over_budget"
    #: Rule 2: the retry gate refused a caller that asked with another key or hash.
    REFUSED_RETRY = "refused_retry"
    #: Rule 3: a conclusive zero, no refs, yet a 2xx response or a bound receipt.
    FALSE_SUCCESS = "false_success"
    #: Rule 4: a conclusive zero although an effect was seen (or a human said it was applied).
    CONFLICTING_EVIDENCE = "conflicting_evidence"
    #: Rule 5: exactly one effect (with our hash, if it carries one) or a bound receipt.
    VERIFIED_APPLIED = "verified_applied"
    #: Rule 5: the only effect seen carries another request hash than the intent.
    EFFECT_HASH_MISMATCH = "effect_hash_mismatch"
    #: Rule 6: a conclusive zero, no refs and no success claim.
    VERIFIED_NOT_APPLIED = "verified_not_applied"
    #: Rule 7: nothing proves either way.
    INDETERMINATE = "indeterminate"
    #: A 2xx response or a bound receipt exists (input of rule 3).
    SUCCESS_CLAIM = "success_claim"
    #: A receipt from the provider that is bound to another request hash: proves nothing.
    RECEIPT_HASH_MISMATCH = "receipt_hash_mismatch"
    #: A weak probe matched: a hint for a human, proof of nothing.
    WEAK_MATCH = "weak_match"
    #: At least one probe could not answer (or answered with an error).
    PROBE_UNAVAILABLE = "probe_unavailable"
    #: An empty read by a probe that could not have seen the effect (SPEC section 3: it does not
    #: cover the action, or finds effects by something the request did not carry): no zero.
    PROBE_BLIND = PROBE_BLIND
    #: The latest usable zero came before the latest settle time (plus the lag for lagging
    #: reads): the provider may still have been applying the request.
    ZERO_NOT_CONCLUSIVE = "zero_not_conclusive"
    #: The intent was recorded again with another hash or key; the first one stands.
    INTENT_CONFLICT = "intent_conflict"
    #: A human resolution decided the verdict.
    HUMAN_RESOLUTION = "human_resolution"
    #: A human resolution exists but proof was recorded after it, so the rules decide.
    RESOLUTION_SUPERSEDED = "resolution_superseded"
    #: The reconcile deadline has passed while the verdict is still indeterminate.
    DEADLINE_PASSED = "deadline_passed"
    #: Retry refused: the next attempt would exceed max_attempts.
    RETRY_BUDGET_EXHAUSTED = "retry_budget_exhausted"
    #: Retry refused: the key retention window since the first attempt has closed.
    RETENTION_WINDOW_CLOSED = "retention_window_closed"
    #: Retry refused: the provider has no idempotency keys, so a retry cannot reuse one.
    NO_IDEMPOTENCY_KEYS = "no_idempotency_keys"
    #: Retry refused: the intent has no idempotency key, so there is no "same key" to reuse.
    INTENT_WITHOUT_KEY = "intent_without_key"
    #: Retry refused until a human approves it (the contract says compensable: false).
    APPROVAL_REQUIRED = "approval_required"


class NextAction:
    """What the caller should do next, one per verdict (two for verified_not_applied)."""

    #: duplicate_effect: stop retries; compensate the extra effect or hand it to a human.
    COMPENSATE = "stop_and_compensate"
    #: duplicate_effect whose every effect a human's compensation covers: no retry, nothing
    #: more to do (the verdict stays: both effects happened).
    COMPENSATED = "compensated"
    #: unsafe_retry: halt the run; a human looks at what the agent did.
    HALT = "halt"
    #: false_success: mark the run unhealthy even though the command "completed".
    MARK_UNHEALTHY = "mark_run_unhealthy"
    #: verified_applied: do not retry; use the recorded outcome, check the user-facing result.
    USE_RECORDED_OUTCOME = "use_recorded_outcome"
    #: verified_not_applied with a grant: retry once, with the same key and parameters.
    RETRY_SAME_KEY = "retry_same_key"
    #: verified_not_applied, but the action cannot be compensated: a human must approve.
    AWAIT_APPROVAL = "await_approval"
    #: indeterminate: wait and reconcile (probe again) until the deadline.
    RECONCILE = "wait_and_reconcile"
    #: Past the deadline, or no retry is possible any more: a human decides.
    ESCALATE = "escalate_to_human"


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the evidence adds up to, before any rule is applied."""

    refs: frozenset[str]
    hash_mismatch: bool
    #: The conclusive zero's place in the recorded evidence (None: there is no conclusive zero).
    conclusive_zero_at: int | None
    bound_receipt: bool
    success_claim: bool
    #: A human once said verified_applied: an effect seen, even after proof superseded it.
    human_applied: bool

    @property
    def conclusive_zero(self) -> bool:
        return self.conclusive_zero_at is not None

    @property
    def effect_seen(self) -> bool:
        """What a zero is weighed against (rules 3, 4, 6): a ref, or a human's "applied"."""
        return bool(self.refs) or self.human_applied


def applied_refs(facts: Facts) -> frozenset[str]:
    """What shows an effect took place (rule 5): `refs`, and the refs of bound receipts."""
    return summarize(facts).applied_refs


def reconcile_deadline(intent: Intent, contract: ProviderContract) -> datetime:
    """Until when probing may settle an indeterminate operation; after it, a human decides."""
    return intent.at + timedelta(seconds=contract.reconcile_deadline_s)


def is_conclusive_zero(obs: Observation, settled: datetime, contract: ProviderContract) -> bool:
    """A zero that proves absence: strictly after the latest settle time (`Summary.
    latest_settle`: the latest dispatch, plus `inflight_s` while the provider may still be
    applying one), and lag-aware.

        settle time          settle time + visibility_lag_s
           |------ lagging zeros say nothing ------|---- a lagging zero is conclusive ---->
           |---- an authoritative zero is conclusive at once (strictly after settling) --->
    """
    authority = authority_of(obs)
    if obs.matches or authority not in PROOF_AUTHORITIES or obs.earliest_at <= settled:
        return False
    if authority is Authority.LAGGING:
        return obs.earliest_at >= settled + timedelta(seconds=contract.visibility_lag_s)
    return True


def read_during_dispatch(obs: Observation, summary: Summary, contract: ProviderContract) -> bool:
    """True when a read may have raced a request still on its way (beyond SPEC: `dispatching`
    is this product's two-phase attempt, see `domain.Outcome`). A zero read then proves nothing,
    whatever the probe's authority, since the provider may not have seen the request yet:

        opened (dispatching)        outcome recorded
           |==== a zero read here raced the request ====|---- zeros count (SPEC rules) ---->
           |==== still open: for visibility_lag_s, as if every read lagged ====|---------->

    The sweep leaves an open attempt unprobed for `schedule.IN_FLIGHT_S`; an on-demand
    reconcile reads at once, so the engine holds its zeros to the provider's own lag."""
    seen = obs.earliest_at
    if summary.outcome_known_at is not None and seen <= summary.outcome_known_at:
        return True
    return summary.open_dispatch_at is not None and seen < summary.open_dispatch_at + timedelta(
        seconds=contract.visibility_lag_s)


def _seen(summary: Summary, contract: ProviderContract) -> _Seen:
    # "Latest" is by observation time; equal times keep recorded order (the summary's fold).
    latest = summary.latest_proof
    zero = (latest is not None
            and is_conclusive_zero(latest, summary.latest_settle(contract.inflight_s), contract)
            and not read_during_dispatch(latest, summary, contract))
    return _Seen(
        refs=frozenset(summary.refs),
        hash_mismatch=summary.match_mismatch,
        conclusive_zero_at=summary.latest_proof_place if zero else None,
        bound_receipt=summary.bound_receipt,
        success_claim=summary.success_claim,
        human_applied=summary.human_applied,
    )


def _unsafe_retry_findings(summary: Summary, contract: ProviderContract) -> list[str]:
    """Rule 2, each way it can hold."""
    found: list[str] = []
    if summary.inconsistent:
        found.append(Finding.INCONSISTENT_ATTEMPT)
    # A refused retry is kept as evidence, but it is not a lock: a human's resolution or
    # approval recorded after it has seen it, and only a refusal after that counts.
    reviewed = summary.reviewed_at
    if summary.refused_at is not None and (reviewed is None or summary.refused_at > reviewed):
        found.append(Finding.REFUSED_RETRY)
    # Only a non_idempotent action can be retried blindly: only its summary keeps what was
    # known before each retry.
    if _any_blind_retry(summary, contract):
        found.append(Finding.BLIND_RETRY)
    last = summary.last_attempt_at
    if last is not None and (
            (last - summary.earliest_dispatch).total_seconds() > contract.key_retention_s):
        found.append(Finding.RETRY_AFTER_RETENTION)
    if summary.attempts_used > contract.max_attempts:
        found.append(Finding.ATTEMPTS_OVER_BUDGET)
    return found


def _any_blind_retry(summary: Summary, contract: ProviderContract) -> bool:
    """Was any retry sent while the verdict, as it stood just before it, was not
    verified_not_applied? A retry reported as sent without the gate's live grant was (SPEC rule
    6). What was known before a retry keeps no retries of its own, so the walk stops there (a
    retry is judged against the evidence, not against earlier retries' blindness)."""
    if summary.ungranted_retry and summary.intent.effect is Effect.NON_IDEMPOTENT:
        return True
    # The walk is remembered on the summary (`Summary.blind_walk`): a retry added in order is
    # judged alone, so a decision does not weigh every retry again as the history grows.
    retries = summary.before_retries
    covered, blind = 0, False
    walk = summary.blind_walk
    if walk is not None and walk[0] == contract:
        _, covered, blind = walk
    if not blind:
        blind = any(_verdict(before, contract) is not Verdict.VERIFIED_NOT_APPLIED
                    for _, _, before in islice(retries, covered, None))
    summary.blind_walk = (contract, len(retries), blind)
    return blind


def _deciding_resolution(summary: Summary, seen: _Seen) -> Resolution | None:
    """The latest recorded human resolution, unless proof was recorded after it.

    Proof is a later attempt, a later receipt, a later match from an authoritative or lagging
    read, or a later conclusive zero. Weak and unavailable reads (errored ones included) and
    zeros that are not conclusive never supersede it: a read outage is no reason to reopen a
    human's decision. "Later" is the recorded order of the evidence, whatever its `at` says. An
    attempt is kept apart from the evidence: it is later when it was recorded after the
    resolution (a report beyond the `attempts_known` the ledger stamped on it) or dispatched
    after the resolution's time (at the same instant, the human saw it).
    """
    latest, place = summary.resolution, summary.resolution_place
    if latest is None:
        return None
    last_attempt = summary.last_attempt_at
    later_attempt = (last_attempt is not None and last_attempt > latest.at) or (
        latest.attempts_known is not None and summary.reports > latest.attempts_known)
    later_receipt = summary.last_receipt_place > place
    later_match = summary.last_match_place > place
    later_zero = seen.conclusive_zero_at is not None and seen.conclusive_zero_at > place
    superseded = later_attempt or later_receipt or later_match or later_zero
    return None if superseded else latest


def _side_findings(summary: Summary, seen: _Seen) -> list[str]:
    """Findings that explain the evidence without being rules themselves."""
    found: list[str] = []
    if len(seen.refs) == 1 and seen.hash_mismatch:
        found.append(Finding.EFFECT_HASH_MISMATCH)
    if seen.success_claim:
        found.append(Finding.SUCCESS_CLAIM)
    if summary.weak_match:
        found.append(Finding.WEAK_MATCH)
    if summary.probe_unavailable:
        found.append(Finding.PROBE_UNAVAILABLE)
    if summary.probe_blind:
        found.append(Finding.PROBE_BLIND)
    if summary.receipt_mismatch:
        found.append(Finding.RECEIPT_HASH_MISMATCH)
    if not seen.conclusive_zero and summary.proof_zero:
        found.append(Finding.ZERO_NOT_CONCLUSIVE)
    if summary.intent_conflict:
        found.append(Finding.INTENT_CONFLICT)
    return found


def _rules(seen: _Seen, unsafe: list[str]) -> list[tuple[Verdict, str]]:
    """Rules 1-6 in SPEC order: (verdict if it is the first, finding) for every rule that holds.
    A human's verified_applied is an effect seen for rules 3, 4 and 6, superseded or not."""
    held: list[tuple[Verdict, str]] = []
    if len(seen.refs) >= 2:
        held.append((Verdict.DUPLICATE_EFFECT, Finding.DUPLICATE_EFFECT))
    if unsafe:
        held.append((Verdict.UNSAFE_RETRY, Finding.UNSAFE_RETRY))
    if seen.conclusive_zero and not seen.effect_seen and seen.success_claim:
        held.append((Verdict.FALSE_SUCCESS, Finding.FALSE_SUCCESS))
    if seen.conclusive_zero and seen.effect_seen:
        held.append((Verdict.INDETERMINATE, Finding.CONFLICTING_EVIDENCE))
    if (len(seen.refs) == 1 and not seen.hash_mismatch) or seen.bound_receipt:
        held.append((Verdict.VERIFIED_APPLIED, Finding.VERIFIED_APPLIED))
    if seen.conclusive_zero and not seen.effect_seen and not seen.success_claim:
        held.append((Verdict.VERIFIED_NOT_APPLIED, Finding.VERIFIED_NOT_APPLIED))
    return held


def evaluate(facts: Facts, contract: ProviderContract, now: datetime) -> Decision:
    """The verdict on one operation from its recorded facts, its provider contract and the time."""
    return decide(summarize(facts), contract, now)


def decide(summary: Summary, contract: ProviderContract, now: datetime) -> Decision:
    """The verdict on one operation from the summary of its facts (`summary.summarize`, or one
    a store keeps folded as it records): the same as `evaluate` on those facts."""
    seen = _seen(summary, contract)
    unsafe = _unsafe_retry_findings(summary, contract)
    held = _rules(seen, unsafe)
    findings = [finding for _, finding in held] + unsafe + _side_findings(summary, seen)

    verdict = held[0][0] if held else Verdict.INDETERMINATE
    if not held:
        findings.append(Finding.INDETERMINATE)
    resolution = _deciding_resolution(summary, seen)
    if resolution is not None:
        verdict = resolution.verdict
        findings.append(Finding.HUMAN_RESOLUTION)
    elif summary.resolution is not None:
        findings.append(Finding.RESOLUTION_SUPERSEDED)

    next_action, retry_allowed, why = _next_action(summary, contract, now, verdict, findings)
    return Decision(verdict=verdict, findings=tuple(dict.fromkeys(findings + why)),
                    next_action=next_action, retry_allowed=retry_allowed)


def _verdict(summary: Summary, contract: ProviderContract) -> Verdict:
    """The verdict alone (rule 2's look at what was known before a retry)."""
    seen = _seen(summary, contract)
    resolution = _deciding_resolution(summary, seen)
    if resolution is not None:
        return resolution.verdict
    held = _rules(seen, _unsafe_retry_findings(summary, contract))
    return held[0][0] if held else Verdict.INDETERMINATE


def _retry_refusals(summary: Summary, contract: ProviderContract, now: datetime,
                    findings: list[str]) -> list[str]:
    """Why a verified_not_applied operation may still not be retried now (empty: it may)."""
    refusals: list[str] = []
    if Finding.UNSAFE_RETRY in findings:
        refusals.append(Finding.UNSAFE_RETRY)
    if summary.attempts_used + 1 > contract.max_attempts:
        refusals.append(Finding.RETRY_BUDGET_EXHAUSTED)
    if (now - summary.earliest_dispatch).total_seconds() > contract.key_retention_s:
        refusals.append(Finding.RETENTION_WINDOW_CLOSED)
    if not contract.idempotency_keys:
        refusals.append(Finding.NO_IDEMPOTENCY_KEYS)
    if summary.intent.idempotency_key is None:
        refusals.append(Finding.INTENT_WITHOUT_KEY)
    approved = summary.approved_at
    if not contract.compensable and not (approved is not None
                                         and approved > summary.latest_dispatch):
        refusals.append(Finding.APPROVAL_REQUIRED)
    return refusals


def _next_action(summary: Summary, contract: ProviderContract, now: datetime, verdict: Verdict,
                 findings: list[str]) -> tuple[str, bool, list[str]]:
    """(next action, retry allowed, extra findings) for a verdict."""
    if verdict is Verdict.VERIFIED_NOT_APPLIED:
        refusals = _retry_refusals(summary, contract, now, findings)
        if not refusals:
            return NextAction.RETRY_SAME_KEY, True, []
        if refusals == [Finding.APPROVAL_REQUIRED]:
            return NextAction.AWAIT_APPROVAL, False, refusals
        return NextAction.ESCALATE, False, refusals
    if verdict is Verdict.INDETERMINATE:
        if now >= reconcile_deadline(summary.intent, contract):
            return NextAction.ESCALATE, False, [Finding.DEADLINE_PASSED]
        return NextAction.RECONCILE, False, []
    if verdict is Verdict.DUPLICATE_EFFECT and summary.compensated_refs >= len(summary.refs):
        return NextAction.COMPENSATED, False, []
    return {
        Verdict.DUPLICATE_EFFECT: NextAction.COMPENSATE,
        Verdict.UNSAFE_RETRY: NextAction.HALT,
        Verdict.FALSE_SUCCESS: NextAction.MARK_UNHEALTHY,
        Verdict.VERIFIED_APPLIED: NextAction.USE_RECORDED_OUTCOME,
    }[verdict], False, []
