"""A retry grant bound to the send (SPEC rule 6): who may open attempt n, and what a report
without the grant does to it. Pure rules; both stores apply them in the transaction that
records the attempt (store/leases.py, store/memory.py).

    ask ── granted: holder, attempt n, token (its hash kept on the lease) ── expires ──▶
           │ open n (dispatching) with the token: yes, while the verdict still allows a retry
           │ open n without it, with another's, or after expiry: no, and nothing is sent
           │ a report of n sent without the grant: recorded (ungranted), the grant moves to n+1

The token is an unguessable random string handed to the holder once; the store keeps only its
SHA-256, so a leaked database cannot open anything. An in-process caller (the agent runtime)
names no token: its holder id never crosses a trust boundary. Over HTTP a token is always
presented (service/operations.py), so a guessable holder name alone opens nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from reconciler.core.domain import Attempt, Decision, Outcome


@dataclass(frozen=True, slots=True)
class Lease:
    """A live retry lease: its holder, the attempt number it allows, its token's hash."""

    holder: str
    attempt: int | None
    grant: str | None


def new_token() -> str:
    """A grant token: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def digest(token: str) -> str:
    """What the store keeps of a token (and compares a presented one by)."""
    return hashlib.sha256(token.encode()).hexdigest()


def held_by(lease: Lease | None, holder: str | None, grant: str | None) -> bool:
    """Whether `lease` is the caller's: the holder named, and its token's hash when one was
    presented (`grant` None: an in-process caller, bound by its holder id)."""
    if lease is None or holder is None or lease.holder != holder:
        return False
    return grant is None or (lease.grant is not None and hmac.compare_digest(lease.grant, grant))


def sent_under(lease: Lease | None, attempt: Attempt, holder: str | None,
               grant: str | None) -> bool:
    """Whether `attempt` was sent under the caller's live lease for its very number."""
    return (lease is not None and lease.attempt == attempt.number
            and held_by(lease, holder, grant))


def opening_allowed(lease: Lease | None, attempt: Attempt, holder: str | None,
                    grant: str | None, recorded: bool, decision: Decision | None) -> bool:
    """May `attempt` (n >= 2, dispatching) be opened for sending? Only under the caller's live
    lease for that very number. A number not yet recorded also needs the verdict the grant
    rested on to allow a retry still (`decision`, drawn in the same transaction): evidence
    recorded since the grant that changed it ends the grant. A recorded one is the holder's
    own repeat of its opening (no one else can have recorded it under this lease)."""
    return sent_under(lease, attempt, holder, grant) and (
        recorded or (decision is not None and decision.retry_allowed))


def moves_grant(lease: Lease | None, attempt: Attempt, holder: str | None, grant: str | None,
                recorded: bool) -> bool:
    """Whether a report (not an opening) made without the live lease takes the number it
    allows (a first report of that number): its holder then keeps a grant for the next one."""
    return (lease is not None and attempt.outcome is not Outcome.DISPATCHING and not recorded
            and lease.attempt == attempt.number and not held_by(lease, holder, grant))
