"""When to probe an undecided operation again, and when to stop and ask a human. Pure.

    dispatch ─ round 1 ─ 1 s ─ round 2 ─ 2 s ─ round 3 ─ 4 s ─ ... ─┬─ deadline or budget spent:
               │ backoff doubles, up to max_backoff_s                │  escalate, never retry
               ├─ never past the settle time, when an authoritative zero first counts
               └─ never past the end of the visibility window, when a lagging zero first counts

An operation stays due until its settle time has passed (SPEC section 4): a zero read while
the provider may still be applying a request proves nothing, so the sweep reads it again once
the provider has had `inflight_s` to finish, and finds an effect committed late.

The sweep's other knobs (concurrency, timeouts, leases) sit here too, so that its defaults are
stated once: the service's settings and the CLI's help read them from `DEFAULT_POLICY`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from reconciler.core.domain import Attempt, Decision, Outcome, ProviderContract, Verdict
from reconciler.core.ports import Scheduled
from reconciler.core.summary import Summary
from reconciler.core.verdicts import Finding, reconcile_deadline


@dataclass(frozen=True, slots=True)
class SweepPolicy:
    """How hard and how long to look before a human is asked."""

    #: Probe rounds in flight at once, per sweeper.
    concurrency: int = 4
    #: A probe call that has not answered by then is recorded `unavailable`.
    probe_timeout_s: float = 10.0
    #: Rounds an operation gets before it is escalated (its deadline may come first).
    probe_budget: int = 20
    first_backoff_s: float = 1.0
    max_backoff_s: float = 300.0
    #: How long a sweeper holds an operation it probes; a crashed one's lapses then.
    lease_s: float = 60.0
    #: Operations one pass takes on at most. They are claimed as rounds end, never ahead of a
    #: free slot, so that no lease is spent waiting in a queue however large this is.
    batch: int = 1000


DEFAULT_POLICY = SweepPolicy()


#: How long an attempt still `dispatching` (opened, no outcome yet) is left unprobed: the send
#: may be on its way, and a read then would see a zero the provider is about to contradict. A
#: worker that died mid-send leaves it dispatching; after this its operation is probed.
IN_FLIGHT_S = 60.0


def due_on_dispatch(attempt: Attempt) -> datetime:
    """When an attempt makes its undecided operation due: once its outcome is known, at once
    (from its dispatch time); while it is still dispatching, only after IN_FLIGHT_S."""
    if attempt.outcome is Outcome.DISPATCHING:
        return attempt.at + timedelta(seconds=IN_FLIGHT_S)
    return attempt.at


def confirmation_due(summary: Summary, decision: Decision,
                     contract: ProviderContract) -> datetime | None:
    """When a verdict that rests on the caller's word is to be confirmed by the provider; None
    when it needs no confirmation (SPEC section 4, "confirmed by the provider").

        dispatch ─ 2xx, receipt or one match: verified_applied ─ window ends ─▶ one more round:
                                                                   a second effect: duplicate_effect
                                                                   a conclusive zero: false_success

    A `verified_applied` from a success claim or a single match is confirmed once, by a read
    made after the visibility window; a human's resolution is not the caller's word, and a
    proving read made after the window is the confirmation already."""
    if (decision.verdict is not Verdict.VERIFIED_APPLIED
            or Finding.HUMAN_RESOLUTION in decision.findings):
        return None
    window_ends = summary.latest_settle(contract.inflight_s) + timedelta(
        seconds=contract.visibility_lag_s)
    # The latest read is the latest by its time: none later means none after the window. A
    # receipt a probe looked up counts (a key-record probe never yields an observation of an
    # applied effect: confirming it by proofs alone re-read it until the probe budget ran out).
    read = summary.latest_read_at
    if read is not None and read >= window_ends:
        return None
    return window_ends


def due_after(summary: Summary, decision: Decision,
              contract: ProviderContract) -> datetime | None:
    """When the next round is due after the verdict changed on a recorded fact: an undecided
    dispatched operation at once (oldest dispatch first), a settled one at its confirmation."""
    if decision.verdict is Verdict.INDETERMINATE:
        return summary.latest_dispatch if summary.attempted else None
    return confirmation_due(summary, decision, contract)


def next_round(summary: Summary, decision: Decision, contract: ProviderContract, rounds: int,
               now: datetime, policy: SweepPolicy, *,
               quiet_until: datetime | None = None) -> Scheduled:
    """What the `rounds`-th probe round of an operation leads to. `quiet_until`: the round's
    every read was cut by the provider's rate limit, which asked for no read before then."""
    if quiet_until is not None:
        return _after_the_pause(summary, decision, contract, now, quiet_until)
    delay = min(policy.first_backoff_s * 2.0 ** (rounds - 1), policy.max_backoff_s)
    if decision.verdict is not Verdict.INDETERMINATE:
        # Settled; only a confirmation can be owed, and a failed read of it is tried again
        # within the budget (never escalated: the verdict stands on what it has).
        confirm = confirmation_due(summary, decision, contract)
        if confirm is None or rounds >= policy.probe_budget:
            return Scheduled(decision, None)
        return Scheduled(decision, confirm if confirm > now else now + timedelta(seconds=delay))
    deadline = reconcile_deadline(summary.intent, contract)
    if now >= deadline or rounds >= policy.probe_budget:
        return Scheduled(decision, None, escalate=True)
    delay = min([delay] + [ahead for ahead in _zero_counts_in(summary, contract, now) if ahead > 0])
    return Scheduled(decision, min(now + timedelta(seconds=delay), deadline))


def _after_the_pause(summary: Summary, decision: Decision, contract: ProviderContract,
                     now: datetime, quiet_until: datetime) -> Scheduled:
    """A round the provider's rate limit cut (Slack's one request a minute, a 429 with
    `Retry-After`): it made no read, so it is not spent against the probe budget, and the next
    round waits out the pause the provider asked for rather than backing off into it. The
    deadline still escalates: a provider that stays rate limited goes to a human on time."""
    if decision.verdict is not Verdict.INDETERMINATE:
        confirm = confirmation_due(summary, decision, contract)
        return Scheduled(decision, None if confirm is None else max(confirm, quiet_until),
                         spent=False)
    deadline = reconcile_deadline(summary.intent, contract)
    if now >= deadline:
        return Scheduled(decision, None, escalate=True, spent=False)
    return Scheduled(decision, min(max(quiet_until, now), deadline), spent=False)


#: A zero counts only strictly after the settle time: the round that reads it comes this late.
_JUST_AFTER_S = 0.001


def _zero_counts_in(summary: Summary, contract: ProviderContract, now: datetime
                    ) -> tuple[float, float]:
    """Seconds from `now` until an authoritative zero first counts (just after the settle time)
    and until a lagging one does (the end of the visibility window after it); zero or less
    when past. Just after the settle time is owed while it is ahead, or when the latest read
    came at or before it (its zero could not count, at the very instant either)."""
    settled = summary.latest_settle(contract.inflight_s)
    until_settled = (settled - now).total_seconds()
    window_ends = until_settled + contract.visibility_lag_s
    read = summary.latest_proof
    if until_settled > 0 or (read is not None and read.earliest_at <= settled):
        return max(until_settled, 0.0) + _JUST_AFTER_S, window_ends
    return 0.0, window_ends
