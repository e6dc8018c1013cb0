"""Terse builders for engine tests: one operation, times in seconds after T0."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reconciler.core.domain import (
    Approval,
    Attempt,
    Authority,
    Effect,
    Evidence,
    Facts,
    Intent,
    Match,
    Observation,
    Outcome,
    ProviderContract,
    Receipt,
    Resolution,
    Verdict,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
H0, K0, OP = "sha256:" + "a" * 64, "key-0", "op-1"
OTHER_HASH = "sha256:" + "b" * 64
#: A provider that settles at once (`inflight_s` 0): the rules other than the settle time read
#: plainly; the settle-time rules set their own `inflight_s`.
CONTRACT = ProviderContract(name="pay", idempotency_keys=True, key_retention_s=3600,
                            visibility_lag_s=30, max_attempts=3, reconcile_deadline_s=600,
                            inflight_s=0)


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def intent(effect: Effect = Effect.NON_IDEMPOTENT, key: str | None = K0) -> Intent:
    return Intent(OP, H0, key, "pay", "charge", effect, T0)


def attempt(n: int, at: float, outcome: Outcome = Outcome.TIMEOUT, *, key: str | None = K0,
            hash_: str = H0, status: int | None = None,
            receipt: Match | None = None) -> Attempt:
    return Attempt(OP, n, key, hash_, t(at), outcome, status, receipt)


def probe(at: float, authority: Authority = Authority.AUTHORITATIVE, *refs: str,
          hash_: str | None = None) -> Observation:
    error = "timeout" if authority is Authority.UNAVAILABLE else None
    return Observation(OP, t(at), "probe", authority, tuple(Match(r, hash_) for r in refs),
                       error)


def receipt(at: float, ref: str = "ch_1", hash_: str | None = H0) -> Receipt:
    return Receipt(OP, t(at), ref, hash_, "lookup")


def resolution(at: float, verdict: Verdict) -> Resolution:
    return Resolution(OP, t(at), verdict, "ops@example.com", "checked the dashboard")


def approval(at: float) -> Approval:
    return Approval(OP, t(at), "ops@example.com", "retry approved")


def facts(*items: Attempt | Evidence, effect: Effect = Effect.NON_IDEMPOTENT) -> Facts:
    return Facts(intent(effect),
                 tuple(i for i in items if isinstance(i, Attempt)),
                 tuple(i for i in items if not isinstance(i, Attempt)))
