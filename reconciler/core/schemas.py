"""The wire format of the sidecar's HTTP API (SPEC section 6), shared by the service and the
client. Validation lives here: what passes these models is safe to hand to the ledger.

Hashes must look like hashes (`sha256:` and 64 hex digits) and identifiers are short, so that
arguments or message bodies cannot slip into the store through a mislabelled field.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from reconciler.core.domain import Authority, Carried, Effect, Outcome, Verdict


def _storable(value: str) -> str:
    # PostgreSQL refuses NUL in text, and UTF-8 cannot encode a lone surrogate ("\ud800" is
    # valid JSON): either would fail the insert with a 500 where it should be a 422.
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


#: Text every store can keep: checked here, so that SQLite and PostgreSQL answer alike.
Storable = AfterValidator(_storable)
Hash = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$",
                            examples=["sha256:" + "0" * 64])]
IDENT_PATTERN = r"^[A-Za-z0-9._:@/+=-]+$"
Ident = Annotated[str, Field(min_length=1, max_length=200, pattern=IDENT_PATTERN)]
Key = Annotated[str, Field(min_length=1, max_length=255), Storable]
Name = Annotated[str, Field(min_length=1, max_length=100), Storable]
#: A retry grant's token as handed out (reconciler/core/grants.py: URL-safe base64).
GrantToken = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-]+$")]
Note = Annotated[str, Field(max_length=2000), Storable]
#: What the store keeps of an intent's correlation (its JSON), at most.
CORRELATION_CHARS = 2000


def _rfc3339_only(value: object) -> object:
    # Pydantic would read a number as a Unix time; the wire format says an RFC 3339 string.
    if isinstance(value, int | float):
        raise ValueError("a time is an RFC 3339 string with a zone, e.g. 2026-01-01T00:00:00Z")
    return value


When = Annotated[AwareDatetime, BeforeValidator(_rfc3339_only)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MatchIn(_In):
    provider_ref: Key
    request_hash: Hash | None = None


class IntentIn(_In):
    """Recorded before dispatch. The server stamps the time."""

    operation_id: Ident
    request_hash: Hash
    idempotency_key: Key | None = None
    provider: Name
    action: Name
    effect: Effect
    run_id: Ident | None = None
    tool_call_id: Ident | None = None
    correlation: dict[Name, Key] = Field(default_factory=dict, max_length=16, description=(
        "References probes need to find the effect (channel id, repository): never content; "
        f"at most {CORRELATION_CHARS} characters as JSON."))
    carries: list[Carried] | None = Field(None, max_length=len(Carried), description=(
        "What the request carried to the provider that a probe can find its effect by "
        "(SPEC section 3): the operation id in the provider's metadata, the idempotency key, "
        "a reference the provider returned. Left out: the idempotency key recorded, alone; a "
        "probe that finds effects by something the request did not carry proves no zero."))

    @model_validator(mode="after")
    def _correlation_fits(self) -> IntentIn:
        if len(json.dumps(self.correlation)) > CORRELATION_CHARS:
            raise ValueError(f"correlation is over {CORRELATION_CHARS} characters as JSON")
        return self


class AttemptIn(_In):
    attempt: int = Field(ge=1, le=1000, strict=True, description="1-based attempt number")
    idempotency_key: Key | None = None
    request_hash: Hash
    at: When | None = Field(None, description="dispatch time; default: now")
    outcome: Outcome
    status: int | None = Field(None, ge=100, le=599, strict=True,
                               description="with outcome=response")
    receipt: MatchIn | None = None
    holder: Ident | None = Field(None, description="the retry grant's holder: opening attempt "
                                 "n>=2 as dispatching needs the grant for n")
    grant: GrantToken | None = Field(None, description="the retry grant's token (RetryOut."
                                     "grant): opening attempt n>=2 needs it; a report of n>=2 "
                                     "made without it is recorded as ungranted")

    @model_validator(mode="after")
    def _status_with_response(self) -> AttemptIn:
        # A timeout with a status code, or a response without one, is a caller's bug that
        # would otherwise pass as a (false) success claim or hide one.
        if (self.status is None) == (self.outcome is Outcome.RESPONSE):
            raise ValueError("status is required with outcome=response and only with it")
        return self


class ReceiptIn(_In):
    kind: Literal["receipt"]
    provider_ref: Key
    request_hash: Hash | None = None
    source: Name = "webhook"
    at: When | None = None


class ObservationIn(_In):
    kind: Literal["observation"]
    probe: Name
    authority: Literal[Authority.AUTHORITATIVE, Authority.LAGGING, Authority.WEAK,
                       Authority.UNAVAILABLE]
    matches: list[MatchIn] = Field(default_factory=list, max_length=100)
    error: Annotated[str, Field(max_length=500), Storable] | None = None
    at: When | None = None


EvidenceIn = Annotated[ReceiptIn | ObservationIn, Field(discriminator="kind")]


#: The actor of a human decision is the credential's name (SPEC section 6, "Trust"): a field
#: kept so that older clients still validate, and read only in loopback mode without credentials.
Actor = Annotated[Name | None, Field(description="ignored when a credential is used: the actor "
                                     "recorded is the credential's name")]


class ResolutionIn(_In):
    verdict: Literal[Verdict.VERIFIED_APPLIED, Verdict.VERIFIED_NOT_APPLIED]
    actor: Actor = None
    note: Note = ""


class ApprovalIn(_In):
    actor: Actor = None
    note: Note = ""


class CompensationIn(_In):
    """A human's record that a duplicate's extra effect was compensated."""

    reference: Key = Field(description="the compensation's reference at the provider (the "
                           "refund's, the cancellation's)")
    actor: Actor = None
    note: Note = ""


class RetryIn(_In):
    idempotency_key: Key | None = None
    request_hash: Hash
    holder: Ident | None = Field(None, description="who would retry; default: a fresh id")


class WebhookAck(BaseModel):
    """What a provider is told: its delivery was accepted, and whether it became a receipt.
    It learns nothing of the verdict."""

    delivery_id: str
    operation_id: str | None = None
    recorded: bool
    detail: str


class MatchOut(BaseModel):
    """A match as recorded; probes may report refs and hashes the input rules would refuse."""

    provider_ref: str
    request_hash: str | None = None


class OperationQueryIn(_In):
    """The query of the operations list; an unknown (misspelt) filter is an error, not ignored."""

    verdict: Verdict | None = None
    escalated: bool | None = Field(None, description="true: a human must act (escalated and "
                                   "still undecided, or next action escalate_to_human)")
    provider: Annotated[str, Storable] | None = Field(None, min_length=1, max_length=100)
    after: Annotated[str, Storable] | None = Field(None, max_length=200,
                                                   description="next_cursor of the previous page")
    limit: int = Field(50, ge=1, le=500)


class IntentOut(BaseModel):
    operation_id: str
    request_hash: str
    idempotency_key: str | None
    provider: str
    action: str
    effect: Effect
    at: datetime
    run_id: str | None
    tool_call_id: str | None
    correlation: dict[str, str]
    carries: list[Carried] | None = Field(None, description="what the request carried to the "
                                          "provider; null: the worker did not say")


class AttemptOut(BaseModel):
    attempt: int
    idempotency_key: str | None
    request_hash: str
    at: datetime = Field(description="the dispatch time the caller claimed")
    outcome: Outcome
    status: int | None
    receipt: MatchOut | None
    recorded_at: datetime | None = Field(None, description="the sidecar's time when it "
                                         "recorded the attempt (the rules use the stricter)")


class EvidenceOut(BaseModel):
    """One timeline entry; `kind` says which fields carry meaning."""

    kind: Literal["receipt", "observation", "resolution", "approval", "intent_conflict",
                  "refused_retry", "compensation"]
    at: datetime
    authority: Authority | None = None
    source: str | None = None
    provider_ref: str | None = None
    request_hash: str | None = None
    idempotency_key: str | None = None
    matches: list[MatchOut] = Field(default_factory=list)
    error: str | None = None
    verdict: Verdict | None = None
    actor: str | None = None
    note: str | None = None
    recorded_at: datetime | None = Field(None, description="the sidecar's time when it "
                                         "recorded a receipt or observation")


class OperationOut(BaseModel):
    intent: IntentOut
    attempts: list[AttemptOut]
    evidence: list[EvidenceOut]
    verdict: Verdict
    findings: list[str]
    next_action: str
    retry_allowed: bool
    escalated: bool
    evaluated_at: datetime

    @property
    def attempts_made(self) -> int:
        """How many attempts were made: the highest number recorded (`attempts` lists every
        report of each, SPEC section 4, so an attempt reported twice is one attempt)."""
        return max((a.attempt for a in self.attempts), default=0)


class RetryOut(BaseModel):
    allowed: bool
    verdict: Verdict
    reason: str
    lease_expires_at: datetime | None
    holder: str
    findings: list[str]
    attempt: int | None = Field(None, description="the attempt number a grant allows")
    grant: str | None = Field(None, description="the grant's token, given to its holder only: "
                              "present it (with the holder) when opening the attempt")


class OperationSummaryOut(BaseModel):
    operation_id: str
    provider: str
    action: str
    verdict: Verdict
    next_action: str
    escalated: bool
    updated_at: datetime
    reason: str | None = Field(None, description="why a human must look at it (escalated, "
                               "escalate_to_human, duplicate_effect, false_success, "
                               "await_approval); null when nothing waits on one")


class OperationListOut(BaseModel):
    items: list[OperationSummaryOut]
    next_cursor: str | None = Field(None, description="pass as ?after= for the next page")


class Problem(BaseModel):
    """RFC 9457 problem details."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    operation_id: str | None = None
