"""What one operation's facts add up to, folded one fact at a time. Pure: no I/O, no clock.

The verdict engine (`verdicts.decide`) reads a `Summary`, never the facts themselves, so that
deciding after a new fact costs the same whatever the operation's history: a store folds each
fact into the operation's summary as it records it (`Summary.add_evidence`), and
`summarize(facts)` is the same fold over a whole history at once. The summary holds exactly
what the rules of SPEC section 4 read, and no fact twice:

    intent ──▶ attempts, every report of each (count, highest number, earliest and latest
               dispatch, which are still unsettled, consistency, success, receipts read
               from response bodies)
           ──▶ evidence in recorded order (refs and the latest proof; receipts; the latest
               human resolution and what was recorded after it; approvals, refusals)
           ──▶ for each retry of a non_idempotent action: the same summary of what was known
               just before it (rule 2's blind retry is judged against the verdict as it stood)

Two orders meet here, as SPEC section 4 fixes them: evidence is weighed against a human
resolution by recorded order (its place), and the latest proof, dispatches and approvals by
their times. An attempt has no place in the recorded order (attempts and evidence are kept
apart), and the summary of what was known before a retry takes the evidence dated before it,
wherever it was recorded. A store folds every fact as it records it (`add_attempt`,
`complete`, `add_evidence`): a retry that reaches the sidecar in order (numbered above every
attempt so far, every piece of evidence so far dated before it) starts its summary of what
was known from a copy of the current one. Only a retry out of order (a lower number than one
already recorded, evidence dated after it already recorded, a report that reached the sidecar
earlier than the first one kept) needs the whole history folded again (`summarize`):
`add_attempt` says so and folds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from reconciler.core.domain import (
    Approval,
    Attempt,
    Authority,
    Compensation,
    Effect,
    Evidence,
    Facts,
    Intent,
    IntentConflict,
    Observation,
    Outcome,
    Receipt,
    RefusedRetry,
    Resolution,
    Verdict,
)
from reconciler.core.sight import PROBE_BLIND

PROOF_AUTHORITIES = frozenset({Authority.AUTHORITATIVE, Authority.LAGGING})
#: The source of a receipt a probe read at the provider (a key record, a receipt lookup).
LOOKUP = "lookup"


def authority_of(obs: Observation) -> Authority:
    """The authority an observation proves with: none at all when it carries an error."""
    return Authority.UNAVAILABLE if obs.error is not None else obs.authority


def dispatched_at(attempt: Attempt, intent: Intent) -> datetime:
    """When an attempt counts as sent at the latest: the later of its claimed and recorded
    times, but never before its intent's."""
    return max(attempt.latest_at, intent.at)


def _later(a: datetime | None, b: datetime) -> datetime:
    return b if a is None or b > a else a


@dataclass(slots=True)
class Summary:
    """One operation's facts as the rules read them. Places count the evidence in recorded
    order from 0; -1 is "none recorded"."""

    intent: Intent

    # -- attempts ---------------------------------------------------------------------------
    #: Distinct attempt numbers recorded (an attempt reported more than once counts once).
    attempts: int = 0
    #: Reports kept, of every attempt (SPEC section 4: an outcome may be reported more than once).
    reports: int = 0
    highest_number: int = 0
    #: The latest `dispatched_at` of an attempt (None: no attempt recorded).
    last_attempt_at: datetime | None = None
    #: The earliest attempt, at its intent's time at the earliest (None: no attempt).
    first_attempt_at: datetime | None = None
    #: An attempt used another key or request hash than the intent (rule 2).
    inconsistent: bool = False
    #: An attempt got a 2xx response.
    succeeded: bool = False
    #: The latest dispatch of an attempt still `dispatching` (opened, no outcome yet).
    open_dispatch_at: datetime | None = None
    #: The latest time the outcome of an attempt opened as dispatching reached the sidecar.
    outcome_known_at: datetime | None = None
    #: A retry (n >= 2) reported as sent without the gate's live grant.
    ungranted_retry: bool = False
    #: The attempts no report has settled yet (SPEC section 4, *settle time*), by number: the
    #: latest dispatch of each. The provider may still be applying them.
    unsettled: dict[int, datetime] = field(default_factory=dict)
    #: The attempt numbers some report settled (a 4xx after a timeout settles it for good).
    settled: set[int] = field(default_factory=set)

    # -- receipts: recorded ones and those read from response bodies ------------------------
    bound_receipt: bool = False
    #: A receipt names a request hash, and not the intent's.
    receipt_mismatch: bool = False
    #: The provider refs of bound receipts.
    receipt_refs: set[str] = field(default_factory=set)
    last_receipt_place: int = -1
    #: The latest receipt a probe read at the provider (source `lookup`), by its time.
    latest_lookup_at: datetime | None = None

    # -- observations -----------------------------------------------------------------------
    #: SPEC's `refs`: refs matched by an authoritative or lagging read without an error.
    refs: set[str] = field(default_factory=set)
    #: Such a match carries a request hash, and not the intent's.
    match_mismatch: bool = False
    #: The latest such read by its time (equal times: the later recorded), and its place.
    latest_proof: Observation | None = None
    latest_proof_place: int = -1
    #: The place of the last such read that matched something.
    last_match_place: int = -1
    #: Such a read once answered with no match.
    proof_zero: bool = False
    weak_match: bool = False
    probe_unavailable: bool = False
    #: An empty read was recorded unavailable because its probe could not have seen the
    #: effect (SPEC section 3, finding probe_blind).
    probe_blind: bool = False

    # -- humans and the gate ----------------------------------------------------------------
    #: The latest recorded resolution and its place.
    resolution: Resolution | None = None
    resolution_place: int = -1
    #: A human once said verified_applied (it counts against a zero even when superseded).
    human_applied: bool = False
    #: The latest time a human resolved or approved: a refused retry before it was seen.
    reviewed_at: datetime | None = None
    approved_at: datetime | None = None
    refused_at: datetime | None = None
    intent_conflict: bool = False
    #: How many effects (`refs`) a human's latest compensation covered: a duplicate whose every
    #: effect was seen before it is compensated (-1: none recorded).
    compensated_refs: int = -1

    #: Evidence folded so far: the place of the next one.
    evidence: int = 0
    #: The latest time of any evidence folded (whether a retry arrives in order).
    latest_evidence_at: datetime | None = None
    #: The open (`dispatching`) reports by dispatch time, how many at each: a completion takes
    #: its opening away, and `open_dispatch_at` is the latest left.
    open_dispatches: dict[datetime, int] = field(default_factory=dict)
    #: For each retry (n >= 2) of a non_idempotent action: (number, when the sidecar knew of
    #: it, the summary of what was known just before it).
    before_retries: list[tuple[int, datetime, Summary]] = field(default_factory=list)
    #: The latest time a retry in `before_retries` reached the sidecar: evidence dated at or
    #: after it belongs to none of their summaries (in order, the common case, no walk).
    last_retry_reached: datetime | None = None
    #: Rule 2's blind-retry walk as far as it went: (the contract it was judged under, how many
    #: of `before_retries` it covered, whether one was blind). Folding a fact into a summary
    #: before a retry forgets it; a retry added in order only extends it (verdicts).
    blind_walk: tuple[object, int, bool] | None = field(default=None, compare=False)

    # -- what the rules read ----------------------------------------------------------------

    @property
    def attempted(self) -> bool:
        return self.attempts > 0

    @property
    def latest_dispatch(self) -> datetime:
        """The latest of the intent's time and every attempt's (SPEC section 4; of an attempt's
        claimed and recorded times, the later: section 6, "Trust")."""
        return self.last_attempt_at or self.intent.at

    @property
    def earliest_dispatch(self) -> datetime:
        """Where the key retention window starts: the earliest attempt (at its intent's time at
        the earliest); the intent's time when none was recorded (it may have been sent
        unrecorded)."""
        return self.first_attempt_at or self.intent.at

    @property
    def attempts_used(self) -> int:
        """Attempts spent against max_attempts: the count, or the highest number if a gap in
        the numbers says some were sent and not recorded."""
        return max(self.attempts, self.highest_number)

    def latest_settle(self, inflight_s: float) -> datetime:
        """SPEC section 4's latest settle time: the latest dispatch, or, where an attempt may
        still be being applied (a timeout, a lost connection, a 5xx, no outcome yet), its
        dispatch plus the provider's `inflight_s`, whichever is later. While no attempt is
        recorded the intent counts as a dispatch with no outcome (a worker can crash after
        sending and before recording the attempt):

            dispatch ─ timeout ─────────── dispatch + inflight_s ─────────▶
               │ a zero read here may race the provider │ a zero here counts
        """
        inflight = timedelta(seconds=inflight_s)
        if not self.attempted:
            return self.intent.at + inflight
        if not self.unsettled:
            return self.latest_dispatch
        return max(self.latest_dispatch, max(self.unsettled.values()) + inflight)

    @property
    def success_claim(self) -> bool:
        """A 2xx response or a bound receipt (input of rule 3)."""
        return self.bound_receipt or self.succeeded

    @property
    def applied_refs(self) -> frozenset[str]:
        """What shows an effect took place (rule 5): `refs`, and the refs of bound receipts."""
        return frozenset(self.refs | self.receipt_refs)

    @property
    def latest_proof_at(self) -> datetime | None:
        """The time of the latest authoritative or lagging read without an error."""
        return None if self.latest_proof is None else self.latest_proof.at

    @property
    def latest_read_at(self) -> datetime | None:
        """The time of the latest read at which the provider answered for the effect: a
        proving observation, or a receipt a probe looked up."""
        reads = [at for at in (self.latest_proof_at, self.latest_lookup_at) if at is not None]
        return max(reads, default=None)

    # -- the fold ---------------------------------------------------------------------------

    def add_attempt(self, attempt: Attempt) -> bool:
        """Fold in one more report of an attempt (a further report of a number already
        recorded is kept beside the first). False, folding nothing, when it is a retry of a
        non_idempotent action out of order (see the module's docstring): then only
        `summarize` over the whole history gives the summary."""
        if self.intent.effect is Effect.NON_IDEMPOTENT and attempt.number >= 2:
            sent = reached(attempt)
            known = next((s for n, s, _ in self.before_retries if n == attempt.number), None)
            if known is None:
                if attempt.number <= self.highest_number or (
                        self.latest_evidence_at is not None and self.latest_evidence_at >= sent):
                    return False
                # Everything known so far is what was known just before it.
                self.before_retries.append((attempt.number, sent, self._copy()))
                self.last_retry_reached = _later(self.last_retry_reached, sent)
            elif sent < known:
                return False
        self._fold_attempt(attempt)
        return True

    def complete(self, open_: Attempt, done: Attempt) -> None:
        """Fold in `done`, the completion of the open report `open_` already folded (the
        record `reports.completion` keeps in its place: the same number, dispatch and time of
        reaching the sidecar, so it belongs to the same summaries before retries)."""
        if self.before_retries and open_.number < self.before_retries[-1][0]:
            self.blind_walk = None
            for number, _, before in self.before_retries:
                if open_.number < number:
                    before.complete(open_, done)
        dispatched = dispatched_at(open_, self.intent)
        left = self.open_dispatches[dispatched] - 1
        if left:
            self.open_dispatches[dispatched] = left
        else:
            del self.open_dispatches[dispatched]
            if self.open_dispatch_at == dispatched:
                self.open_dispatch_at = max(self.open_dispatches, default=None)
        self.reports -= 1  # it takes its opening's place
        self._fold_attempt(done)

    def _copy(self) -> Summary:
        """What is known now, as the summary of what was known before a retry (which keeps
        no retries of its own)."""
        return replace(self, unsettled=dict(self.unsettled), settled=set(self.settled),
                       receipt_refs=set(self.receipt_refs), refs=set(self.refs),
                       open_dispatches=dict(self.open_dispatches), before_retries=[],
                       last_retry_reached=None, blind_walk=None)

    def _fold_attempt(self, attempt: Attempt) -> None:
        # Retries are kept by number, so an attempt above the last one is before none of them.
        if self.before_retries and attempt.number < self.before_retries[-1][0]:
            self.blind_walk = None
            for number, _, before in self.before_retries:
                if attempt.number < number:
                    before._fold_attempt(attempt)
        intent = self.intent
        number, dispatched = attempt.number, dispatched_at(attempt, intent)
        if number not in self.settled and number not in self.unsettled:
            self.attempts += 1
        self.reports += 1
        if attempt.settles:
            self.settled.add(number)
            self.unsettled.pop(number, None)
        elif number not in self.settled:
            self.unsettled[number] = _later(self.unsettled.get(number), dispatched)
        self.ungranted_retry |= attempt.ungranted and number >= 2
        self.highest_number = max(self.highest_number, number)
        self.last_attempt_at = _later(self.last_attempt_at, dispatched)
        first = max(attempt.earliest_at, intent.at)
        if self.first_attempt_at is None or first < self.first_attempt_at:
            self.first_attempt_at = first
        self.inconsistent |= (attempt.idempotency_key != intent.idempotency_key
                              or attempt.request_hash != intent.request_hash)
        self.succeeded |= attempt.succeeded
        if attempt.outcome is Outcome.DISPATCHING:
            self.open_dispatches[dispatched] = self.open_dispatches.get(dispatched, 0) + 1
            self.open_dispatch_at = _later(self.open_dispatch_at, dispatched)
        elif attempt.completed_at is not None:
            self.outcome_known_at = _later(self.outcome_known_at, attempt.completed_at)
        if attempt.receipt is not None:
            self._receipt(attempt.receipt.provider_ref, attempt.receipt.request_hash)

    def add_evidence(self, evidence: Evidence) -> None:
        """Fold in the next piece of evidence in recorded order."""
        last = self.last_retry_reached
        if last is not None and evidence.at < last:
            self.blind_walk = None
            for _, sent, before in self.before_retries:
                if evidence.at < sent:
                    before.add_evidence(evidence)
        place = self.evidence
        self.evidence += 1
        self.latest_evidence_at = _later(self.latest_evidence_at, evidence.at)
        match evidence:
            case Observation():
                self._observation(evidence, place)
            case Receipt():
                self.last_receipt_place = place
                if evidence.source == LOOKUP:
                    self.latest_lookup_at = _later(self.latest_lookup_at, evidence.at)
                self._receipt(evidence.provider_ref, evidence.request_hash)
            case Resolution():
                self.resolution, self.resolution_place = evidence, place
                self.human_applied |= evidence.verdict is Verdict.VERIFIED_APPLIED
                self.reviewed_at = _later(self.reviewed_at, evidence.at)
            case Approval():
                self.reviewed_at = _later(self.reviewed_at, evidence.at)
                self.approved_at = _later(self.approved_at, evidence.at)
            case IntentConflict():
                self.intent_conflict = True
            case RefusedRetry():
                self.refused_at = _later(self.refused_at, evidence.at)
            case Compensation():
                self.compensated_refs = len(self.refs)

    def _observation(self, obs: Observation, place: int) -> None:
        authority = authority_of(obs)
        if authority is Authority.WEAK and obs.matches:
            self.weak_match = True
        elif authority is Authority.UNAVAILABLE:
            self.probe_unavailable = True
            self.probe_blind |= (obs.error or "").startswith(PROBE_BLIND)
        if authority not in PROOF_AUTHORITIES:
            return
        hash_ = self.intent.request_hash
        for match in obs.matches:
            self.refs.add(match.provider_ref)
            self.match_mismatch |= match.request_hash is not None and match.request_hash != hash_
        if obs.matches:
            self.last_match_place = place
        else:
            self.proof_zero = True
        # Equal times keep recorded order: the later line wins.
        if self.latest_proof is None or obs.at >= self.latest_proof.at:
            self.latest_proof, self.latest_proof_place = obs, place

    def _receipt(self, ref: str, request_hash: str | None) -> None:
        # A receipt that names no hash (Postmark's MessageID) is unbound, not bound elsewhere.
        if request_hash == self.intent.request_hash:
            self.bound_receipt = True
            self.receipt_refs.add(ref)
        elif request_hash is not None:
            self.receipt_mismatch = True


def reached(attempt: Attempt) -> datetime:
    """When a report reached the sidecar, by the sidecar's own clock: a caller's skewed clock
    neither hides evidence from rule 2 nor invents some."""
    return attempt.recorded_at or attempt.at


def summarize(facts: Facts) -> Summary:
    """The fold of a whole history: its attempts, then its evidence in recorded order."""
    summary = Summary(facts.intent)
    if facts.intent.effect is Effect.NON_IDEMPOTENT:
        # What was known when a retry reached the sidecar: an attempt reported more than once
        # reached it with its first report.
        first: dict[int, datetime] = {}
        for a in facts.attempts:
            if a.number >= 2:
                sent = reached(a)
                first[a.number] = min(first.get(a.number, sent), sent)
        summary.before_retries = [(number, sent, Summary(facts.intent))
                                  for number, sent in sorted(first.items())]
        summary.last_retry_reached = max(first.values(), default=None)
    for attempt in facts.attempts:
        summary._fold_attempt(attempt)
    for evidence in facts.evidence:
        summary.add_evidence(evidence)
    return summary
