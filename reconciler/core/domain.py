"""The facts the reconciler records about an operation, as plain immutable data (SPEC section 2).

Three layers per operation: the *intent* (what the agent committed to, before dispatch), the
*attempts* (what the caller saw on the wire) and the *evidence* (what the provider says happened:
receipts, probe observations, and a human's resolution or approval). None of them holds a secret,
a message body or full tool arguments: only hashes, identities and references.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import TypeVar


class Effect(StrEnum):
    """The side-effect class of an action: how dangerous a second dispatch is."""

    READ_ONLY = "read_only"
    IDEMPOTENT_WRITE = "idempotent_write"
    NON_IDEMPOTENT = "non_idempotent"


class Outcome(StrEnum):
    """What the caller saw of one attempt."""

    RESPONSE = "response"
    TIMEOUT = "timeout"
    CONNECTION_ERROR = "connection_error"
    NOT_SENT = "not_sent"
    #: Recorded before the first byte leaves, completed with one of the others after: until
    #: then the engine reads it as an unknown outcome, like a timeout.
    DISPATCHING = "dispatching"


class Authority(StrEnum):
    """How much an observation proves (SPEC section 3)."""

    AUTHORITATIVE = "authoritative"
    LAGGING = "lagging"
    WEAK = "weak"
    UNAVAILABLE = "unavailable"
    HUMAN = "human"


class Verdict(StrEnum):
    """The reconciler's answer about an operation (SPEC section 4)."""

    DUPLICATE_EFFECT = "duplicate_effect"
    UNSAFE_RETRY = "unsafe_retry"
    FALSE_SUCCESS = "false_success"
    VERIFIED_APPLIED = "verified_applied"
    VERIFIED_NOT_APPLIED = "verified_not_applied"
    INDETERMINATE = "indeterminate"


class Carried(StrEnum):
    """What a request carried to the provider that a probe can find its effect by (SPEC section
    3, *correlation*): an intent says which (`Intent.carries`), a probe which it reads
    (`probes.base.Sight.finds_by`); a probe that reads by something the request did not carry is
    blind to it."""

    #: The operation id, attached where the provider keeps metadata (Stripe's `metadata`, a
    #: Slack message's `metadata`, a marker in an issue body).
    OPERATION_ID = "operation_id"
    #: The idempotency key, sent where the provider can be asked by key.
    IDEMPOTENCY_KEY = "idempotency_key"
    #: A reference the provider returned (an object id in a response or receipt).
    PROVIDER_REF = "provider_ref"


@dataclass(frozen=True, slots=True)
class ProviderContract:
    """What a provider promises; configuration, one per provider name.

    Defaults are the cautious reading: a 60 s visibility lag for lagging reads, 60 s during
    which a request whose caller stopped waiting may still be applied (`inflight_s`), a 24 h key
    retention (Stripe's), three attempts in all, one hour to reconcile before a human is asked.
    """

    name: str
    idempotency_keys: bool = False
    key_retention_s: float = 86_400.0
    visibility_lag_s: float = 60.0
    max_attempts: int = 3
    #: How long after a dispatch the provider may still apply a request whose caller stopped
    #: waiting (a timeout, a lost connection, a 5xx, no outcome yet): SPEC section 4's settle time.
    inflight_s: float = 60.0
    reconcile_deadline_s: float = 3_600.0
    compensable: bool = True


@dataclass(frozen=True, slots=True)
class Intent:
    """The logical operation the agent committed to, recorded before dispatch."""

    operation_id: str
    request_hash: str
    idempotency_key: str | None
    provider: str
    action: str
    effect: Effect
    at: datetime
    run_id: str | None = None
    tool_call_id: str | None = None
    #: References probes need to find the effect (a channel id, a repository), never content.
    correlation: Mapping[str, str] = field(default_factory=dict)
    #: What the request carried to the provider (SPEC section 3). None: the worker did not say,
    #: and is taken to have carried the idempotency key it recorded and nothing else.
    carries: frozenset[Carried] | None = None

    @property
    def carried(self) -> frozenset[Carried]:
        """What the request carried, as SPEC section 3 reads a worker that did not say."""
        if self.carries is not None:
            return self.carries
        return frozenset({Carried.IDEMPOTENCY_KEY}) if self.idempotency_key else frozenset()

    def same_identity(self, other: Intent) -> bool:
        """True when `other` is an identical repeat of this intent (times may differ)."""
        return (self.request_hash, self.idempotency_key, self.provider, self.action,
                self.effect) == (other.request_hash, other.idempotency_key, other.provider,
                                 other.action, other.effect)


@dataclass(frozen=True, slots=True)
class Match:
    """One effect a probe (or a response body) found at the provider."""

    provider_ref: str
    request_hash: str | None = None


def _later(claimed: datetime, recorded: datetime | None) -> datetime:
    return claimed if recorded is None else max(claimed, recorded)


def _earlier(claimed: datetime, recorded: datetime | None) -> datetime:
    return claimed if recorded is None else min(claimed, recorded)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One dispatch and its transport outcome; `at` is the dispatch time the caller claims,
    `recorded_at` the sidecar's time when it recorded it (SPEC section 6, "Trust").

    The rules take whichever of the two is stricter, so that a caller's clock can delay a
    verdict, never hasten one:

        claimed at ──┐        ┌── recorded_at        (or the other way round)
                     ▼        ▼
        ─────────────●════════●──────────▶
          earliest_at          latest_at
          retention counts     "after the latest dispatch" (zeros, approvals)
          from here            starts here
    """

    operation_id: str
    number: int
    idempotency_key: str | None
    request_hash: str
    at: datetime
    outcome: Outcome
    status: int | None = None
    receipt: Match | None = None
    recorded_at: datetime | None = None
    #: For an attempt opened as dispatching: the sidecar's time when its outcome came in.
    completed_at: datetime | None = None
    #: A retry (n >= 2) reported as sent without the retry gate's live grant: recorded all the
    #: same (it happened), and judged as dispatched while the verdict was not
    #: verified_not_applied (SPEC rule 6).
    ungranted: bool = False

    @property
    def latest_at(self) -> datetime:
        """The later of the claimed and recorded times: when the dispatch may have happened
        at the latest (a zero or an approval must come after it)."""
        return _later(self.at, self.recorded_at)

    @property
    def earliest_at(self) -> datetime:
        """The earlier of the two: where the key retention window of a first attempt starts."""
        return _earlier(self.at, self.recorded_at)

    def same_facts(self, other: Attempt) -> bool:
        """True when `other` reports the same attempt (when it was recorded aside)."""
        return replace(other, recorded_at=self.recorded_at, completed_at=self.completed_at) == self

    @property
    def settles(self) -> bool:
        """This report settles its attempt at its dispatch time (SPEC section 4): nothing was
        sent, or the provider answered below 500. After a timeout, a lost connection, a 5xx or
        no outcome yet the provider may still be applying it, for the contract's `inflight_s`."""
        return self.outcome is Outcome.NOT_SENT or (
            self.outcome is Outcome.RESPONSE and self.status is not None and self.status < 500)

    @property
    def succeeded(self) -> bool:
        """A 2xx response: the provider claims it did the work."""
        return self.outcome is Outcome.RESPONSE and self.status is not None and (
            200 <= self.status < 300)


def completes(open_: Attempt, report: Attempt) -> bool:
    """True when `report` completes the attempt recorded as `open_`: that one is still
    dispatching, this one has its outcome, and both are the same dispatch (number, key, hash;
    the dispatch time is the open record's)."""
    return (open_.outcome is Outcome.DISPATCHING and report.outcome is not Outcome.DISPATCHING
            and (open_.operation_id, open_.number, open_.idempotency_key, open_.request_hash)
            == (report.operation_id, report.number, report.idempotency_key,
                report.request_hash))


@dataclass(frozen=True, slots=True)
class Receipt:
    """Provider evidence of processing: an idempotent replay, a receipt lookup, a webhook."""

    operation_id: str
    at: datetime
    provider_ref: str
    request_hash: str | None
    source: str
    #: The sidecar's time when it recorded it; `at` is what the sender claims.
    recorded_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """What one probe saw at one time."""

    operation_id: str
    at: datetime
    probe: str
    authority: Authority
    matches: tuple[Match, ...] = ()
    error: str | None = None
    #: The sidecar's time when it recorded it; `at` is what the observer claims.
    recorded_at: datetime | None = None
    #: The provider's rate limit cut this read (a 429 or 503 with `Retry-After`, or the request
    #: budget the probe shares with others): no read was made, and another is worth making
    #: only from this time on. It schedules the next probe round and is not stored.
    retry_at: datetime | None = None

    @property
    def earliest_at(self) -> datetime:
        """The earlier of the claimed and recorded times: a zero counts as seen no later than
        this (a zero claimed later than it was recorded proves nothing more)."""
        return _earlier(self.at, self.recorded_at)


@dataclass(frozen=True, slots=True)
class Resolution:
    """A human's decision on the verdict (kept as evidence with authority `human`)."""

    operation_id: str
    at: datetime
    verdict: Verdict
    actor: str
    note: str = ""
    #: How many attempt reports were recorded when the human decided (stamped by the ledger;
    #: None: not known). A report beyond them is later than the decision however it is dated:
    #: attempts and evidence are kept apart, so recorded order needs this count.
    attempts_known: int | None = None


@dataclass(frozen=True, slots=True)
class Approval:
    """A human approves the next retry of an action that cannot be compensated."""

    operation_id: str
    at: datetime
    actor: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class IntentConflict:
    """Somebody tried to record this operation id again with another hash or key."""

    operation_id: str
    at: datetime
    request_hash: str
    idempotency_key: str | None


@dataclass(frozen=True, slots=True)
class RefusedRetry:
    """The retry gate refused a caller who would have retried with another key or hash."""

    operation_id: str
    at: datetime
    request_hash: str
    idempotency_key: str | None
    holder: str


@dataclass(frozen=True, slots=True)
class Compensation:
    """A human records that the extra effect of a duplicate was compensated (refunded,
    cancelled, deleted): `reference` is the compensation's own at the provider. The verdict
    stays duplicate_effect (both effects happened); only the effects seen when it was recorded
    are covered by it, so a further effect puts the operation back before a human."""

    operation_id: str
    at: datetime
    actor: str
    note: str
    reference: str


Evidence = (Receipt | Observation | Resolution | Approval | IntentConflict | RefusedRetry
            | Compensation)
E = TypeVar("E", Receipt, Observation, Resolution, Approval, IntentConflict, RefusedRetry,
            Compensation)


@dataclass(frozen=True, slots=True)
class Facts:
    """Everything recorded about one operation: the input of the verdict engine."""

    intent: Intent
    attempts: tuple[Attempt, ...] = ()
    evidence: tuple[Evidence, ...] = ()

    def of(self, kind: type[E]) -> list[E]:
        """The evidence of one kind, in recorded order."""
        return [e for e in self.evidence if isinstance(e, kind)]

    def before(self, when: datetime, attempts_below: int) -> Facts:
        """What was known just before a dispatch at `when` of attempt number `attempts_below`."""
        return replace(
            self,
            attempts=tuple(a for a in self.attempts if a.number < attempts_below),
            evidence=tuple(e for e in self.evidence if e.at < when),
        )


class Snapshot:
    """An operation's facts as they stood when a decision was drawn from them, read the first
    time they are asked for. A store that keeps its facts in memory hands one over without
    copying the whole history on every decision (replay decides after every line and reads
    the facts of none); two snapshots are equal when their facts are."""

    __slots__ = ("_facts", "_read")

    def __init__(self, read: Callable[[], Facts]) -> None:
        self._read = read
        self._facts: Facts | None = None

    @classmethod
    def of(cls, facts: Facts) -> Snapshot:
        """The snapshot of facts already read."""
        snapshot = cls(lambda: facts)
        snapshot._facts = facts
        return snapshot

    @property
    def facts(self) -> Facts:
        if self._facts is None:
            self._facts = self._read()
        return self._facts

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Snapshot) and self.facts == other.facts

    __hash__ = None  # type: ignore[assignment]  # equal by facts that are read on demand

    def __repr__(self) -> str:
        return f"Snapshot({self.facts!r})"


@dataclass(frozen=True, slots=True)
class Decision:
    """The engine's answer: a verdict, every finding that holds, what to do next."""

    verdict: Verdict
    findings: tuple[str, ...]
    next_action: str
    retry_allowed: bool
