"""The retry gate: the one place a retry of a side effect is allowed to start.

A worker asks with the idempotency key and request hash it is about to use. The gate answers
yes only when SPEC rule 6 allows it (the engine's `retry_allowed`), the caller's key and hash are
the intent's, and the caller wins the retry lease, which exactly one caller holds at a time:

    ask ── granted (attempt n+1) ── lease_expires_at ─────▶
            │ the holder records n+1   │ not recorded by now? the grant lapses; the
            │ as dispatching, then     │ holder must ask again before sending anything
            │ sends and completes it   │

The grant names the attempt number it allows and carries a token, an unguessable random string
whose hash alone the store keeps (reconciler/core/grants.py). Opening that attempt must present the
holder and the token (`record_attempt`), and the verdict the grant rested on must still allow a
retry: an expired grant, another caller's, a wrong or missing token, or one whose verdict new
evidence changed cannot open attempt n+1, so two callers cannot both send it, and a refused
caller is told not to send. A refused opening is kept as a refused retry.

An attempt n >= 2 reported only after it was sent (one phase) is recorded all the same, never
refused (it happened), marked `ungranted` when it was not sent under the live grant, and it
does not take the real holder's grant away: the grant moves on to the next number.

A caller that asks with another key or hash is refused and recorded as a refused retry, which the
engine counts as unsafe (rule 2): the worker is about to send something the intent never covered.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from reconciler.core.domain import Attempt, Decision, Facts, Outcome, RefusedRetry, Verdict
from reconciler.core.errors import RetryNotGrantedError
from reconciler.core.grants import digest, held_by, new_token, sent_under
from reconciler.core.ports import Leases
from reconciler.ledger import Ledger, Recorded


class GateResult(StrEnum):
    """Why the gate answered as it did; maps onto HTTP statuses in the service."""

    GRANTED = "granted"
    #: The verdict does not allow a retry (yet, or ever); the reason says which.
    REFUSED = "refused"
    #: Another caller holds the retry lease (IETF Idempotency-Key draft: 409).
    IN_PROGRESS = "in_progress"
    #: The caller's key or hash is not the intent's (IETF Idempotency-Key draft: 422).
    MISMATCH = "mismatch"


@dataclass(frozen=True, slots=True)
class RetryRequest:
    operation_id: str
    idempotency_key: str | None
    request_hash: str
    holder: str


@dataclass(frozen=True, slots=True)
class GateAnswer:
    result: GateResult
    verdict: Verdict
    reason: str
    findings: tuple[str, ...]
    lease_expires_at: datetime | None = None
    #: The attempt number a grant allows.
    attempt: int | None = None
    #: The grant's token, given to its holder only: present it when opening the attempt.
    token: str | None = None

    @property
    def allowed(self) -> bool:
        return self.result is GateResult.GRANTED


class RetryGate:
    """Decides retry requests against the ledger, and hands out the retry lease."""

    def __init__(self, ledger: Ledger, leases: Leases, lease_ttl_s: float = 60.0) -> None:
        self.ledger = ledger
        self.leases = leases
        self.lease_ttl_s = lease_ttl_s

    def ask(self, request: RetryRequest) -> GateAnswer:
        now = self.ledger.clock()
        key = (request.idempotency_key, request.request_hash)

        def grantable(facts: Facts, decision: Decision) -> int | None:
            # The attempt a grant allows, when this caller may be granted one: SPEC rule 6
            # allows a retry and the caller resends the intent's own key and hash.
            if not decision.retry_allowed or key != (facts.intent.idempotency_key,
                                                     facts.intent.request_hash):
                return None
            return max((a.number for a in facts.attempts), default=0) + 1

        # The judgement and the lease in one transaction: a grant is never given on a verdict
        # that evidence recorded in between has changed.
        token = new_token()
        judgement, expires = self.ledger.judge_retry(
            self.leases, request.operation_id, request.holder, grantable, now,
            self.lease_ttl_s, digest(token))
        intent = judgement.facts.intent
        if key != (intent.idempotency_key, intent.request_hash):
            judgement = self.ledger.record_evidence(RefusedRetry(
                request.operation_id, now, request.request_hash, request.idempotency_key,
                request.holder))
            return GateAnswer(
                GateResult.MISMATCH, judgement.decision.verdict,
                "the retry would use another idempotency key or request hash than the "
                "recorded intent; a retry must resend the same operation (recorded as "
                "unsafe_retry evidence)", judgement.decision.findings)
        decision = judgement.decision
        if not decision.retry_allowed:
            return GateAnswer(GateResult.REFUSED, decision.verdict,
                              f"retry not allowed: verdict {decision.verdict.value}, next action "
                              f"{decision.next_action}", decision.findings)
        if expires is None:
            return GateAnswer(GateResult.IN_PROGRESS, decision.verdict,
                              "another caller holds the retry lease for this operation",
                              decision.findings)
        number = grantable(judgement.facts, decision)
        return GateAnswer(GateResult.GRANTED, decision.verdict,
                          f"granted to {request.holder} for attempt {number}: record it (as "
                          "dispatching, with this holder and the grant's token) and dispatch "
                          "once, with the same key and parameters, before the lease expires",
                          decision.findings, expires, number, token)

    def record_attempt(self, attempt: Attempt, holder: str | None, *, token: str | None = None,
                       stamped: bool = False) -> Recorded:
        """Record an attempt through the gate. Opening attempt n>=2 (outcome `dispatching`,
        before anything is sent) needs the live grant for number n held by `holder`, with its
        `token`, while the verdict still allows the retry: RetryNotGrantedError otherwise
        (recorded as a refused retry), and the caller must not send. Its repeat needs the same.
        The completion of an open attempt needs none (its opening was granted); nor does an
        attempt reported only after the fact (one phase): it was sent, and refusing it would
        lose the evidence. It is recorded `ungranted` when it was sent without the live grant,
        and the holder's grant moves on to the next number.

        `token` None: an in-process caller, bound by its holder id alone (the agent runtime's
        never crosses a trust boundary). Over HTTP the token presented is always passed, ""
        when none was (service/operations.py)."""
        if attempt.number < 2:
            return self.ledger.record_attempt(attempt, stamped=stamped)
        grant = None if token is None else digest(token)
        if attempt.outcome is not Outcome.DISPATCHING:
            attempt = self._as_reported(attempt, holder, grant)
        try:
            # The grant checked (or moved on) in the transaction that records the attempt: no
            # grant can lapse or pass to another caller between the check and the recording.
            return self.ledger.record_attempt(attempt, stamped=stamped, granted_by=self.leases,
                                              holder=holder, grant=grant)
        except RetryNotGrantedError:
            lease = self.leases.retry_lease(attempt.operation_id, self.ledger.clock())
            if lease is not None and held_by(lease, holder, grant):
                # The live holder itself: its number was taken by a report sent without the
                # grant, or new evidence changed the verdict. Nothing unsafe was tried, and a
                # refused retry on record would hide that verdict (rule 2 reads it as unsafe).
                raise RetryNotGrantedError.held(attempt.operation_id, attempt.number,
                                                lease.attempt) from None
            self.ledger.record_evidence(RefusedRetry(
                attempt.operation_id, self.ledger.clock(), attempt.request_hash,
                attempt.idempotency_key, holder or ""))
            raise

    def _as_reported(self, attempt: Attempt, holder: str | None, grant: str | None) -> Attempt:
        """A report of attempt n >= 2, `ungranted` when it is the first of its number and was
        not made under the live grant for n (a report sent without one: SPEC rule 6). A further
        report of a recorded attempt (a completion, a late answer) takes the first's mark, so
        an identical repeat is still one. Read before the recording (off the hot path: only
        retries come here); a grant lapsing in between only makes a report look granted."""
        if attempt.outcome is Outcome.NOT_SENT:
            return attempt  # nothing was sent: no grant was needed
        kept = [a for a in self.ledger.store.facts(attempt.operation_id).attempts
                if a.number == attempt.number]
        if kept:
            return replace(attempt, ungranted=kept[0].ungranted)
        lease = self.leases.retry_lease(attempt.operation_id, self.ledger.clock())
        return replace(attempt, ungranted=not sent_under(lease, attempt, holder, grant))
