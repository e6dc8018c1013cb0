"""Reading SPEC section 5 NDJSON fixtures: one validated event per line, or a FixtureError that
names the file and line. Parsing only; `replay` gives the events meaning.

Times keep the precision they are given, down to the microsecond (Python's and the store's,
SQLite text and PostgreSQL timestamptz alike). Finer digits are cut, and where they are cut a
dispatch rounds up and an observation rounds down (SPEC section 4), so that a lost fraction can
only make a zero look earlier against a dispatch, never later:

    dispatch  09:00:00.0000009  -> 09:00:00.000001  (intent, attempt: `DispatchTime`)
    observed  09:00:00.0000009  -> 09:00:00.000000  (probe, receipt, resolution, approval)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic_core import PydanticCustomError

from reconciler.core.domain import (
    Approval,
    Attempt,
    Authority,
    Carried,
    Effect,
    Intent,
    Match,
    Observation,
    Outcome,
    ProviderContract,
    Receipt,
    Resolution,
    Verdict,
)
from reconciler.core.errors import FixtureError

#: Longer lines are refused before they are parsed: no real event comes near this.
MAX_LINE_BYTES = 1 << 20

NonNegative = Annotated[float, Field(ge=0)]
Text = Annotated[str, Field(min_length=1, max_length=200)]


def utc(at: datetime) -> datetime:
    return at.astimezone(UTC)


#: The fraction of a second in an RFC 3339 time: its first six digits are kept, the rest cut.
_FRACTION = re.compile(r"[Tt ]\d{2}:\d{2}:\d{2}[.,]\d{6}(\d+)")


#: JSON text reaches a field validator as a Python str, which strict mode refuses as a time.
_TIME_TEXT: TypeAdapter[datetime] = TypeAdapter(AwareDatetime)


def _round_dispatch_up(value: Any, handler: ValidatorFunctionWrapHandler) -> datetime:
    """Parse as an AwareDatetime (which cuts past the microsecond), then round up what was cut.
    Anything but text goes to the strict parser, which refuses it as usual."""
    if not isinstance(value, str):
        return handler(value)  # type: ignore[no-any-return]
    try:
        at = _TIME_TEXT.validate_python(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise PydanticCustomError(first["type"], first["msg"]) from None
    cut = _FRACTION.search(value)
    if cut is None or not cut.group(1).strip("0"):
        return at
    try:
        return at + timedelta(microseconds=1)
    except OverflowError:
        raise ValueError("a dispatch time this close to year 10000 cannot be rounded up") from None


#: A dispatch time (an intent's or an attempt's): digits past the microsecond round it up.
DispatchTime = Annotated[AwareDatetime, WrapValidator(_round_dispatch_up)]


class _Line(BaseModel):
    # Strict: "1" is not 1 and "true" is not true. Unknown fields are ignored (SPEC section 5).
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class ProviderLine(_Line):
    type: Literal["provider"]
    name: Text
    idempotency_keys: bool | None = None
    key_retention_s: NonNegative | None = None
    visibility_lag_s: NonNegative | None = None
    max_attempts: Annotated[int, Field(ge=1)] | None = None
    reconcile_deadline_s: NonNegative | None = None
    compensable: bool | None = None
    inflight_s: NonNegative | None = None

    def contract(self) -> ProviderContract:
        given = self.model_dump(exclude={"type"}, exclude_none=True)
        return ProviderContract(**given)


class IntentLine(_Line):
    type: Literal["intent"]
    operation_id: Text
    request_hash: Text
    idempotency_key: str | None = None
    provider: Text
    action: Text
    effect: Effect
    at: DispatchTime
    run_id: str | None = None
    tool_call_id: str | None = None
    #: What the request carried (SPEC section 3); absent: the recorded key alone.
    carries: list[Carried] | None = None

    def fact(self) -> Intent:
        return Intent(self.operation_id, self.request_hash, self.idempotency_key, self.provider,
                      self.action, self.effect, utc(self.at), self.run_id, self.tool_call_id,
                      carries=None if self.carries is None else frozenset(self.carries))


class MatchModel(_Line):
    provider_ref: Text
    request_hash: str | None = None

    def fact(self) -> Match:
        return Match(self.provider_ref, self.request_hash)


class AttemptLine(_Line):
    type: Literal["attempt"]
    operation_id: Text
    attempt: Annotated[int, Field(ge=1)]
    idempotency_key: str | None = None
    request_hash: Text
    at: DispatchTime
    outcome: Outcome
    status: Annotated[int, Field(ge=100, le=599)] | None = None
    receipt: MatchModel | None = None

    def fact(self) -> Attempt:
        return Attempt(self.operation_id, self.attempt, self.idempotency_key, self.request_hash,
                       utc(self.at), self.outcome, self.status,
                       self.receipt.fact() if self.receipt else None)


class ReceiptLine(_Line):
    type: Literal["receipt"]
    operation_id: Text
    at: AwareDatetime
    provider_ref: Text
    request_hash: str | None = None
    source: Text = "lookup"

    def fact(self) -> Receipt:
        return Receipt(self.operation_id, utc(self.at), self.provider_ref, self.request_hash,
                       self.source)


class ProbeLine(_Line):
    type: Literal["probe"]
    operation_id: Text
    at: AwareDatetime
    probe: Text
    authority: Literal[Authority.AUTHORITATIVE, Authority.LAGGING, Authority.WEAK,
                       Authority.UNAVAILABLE]
    matches: list[MatchModel] = []
    error: str | None = None

    def fact(self) -> Observation:
        return Observation(self.operation_id, utc(self.at), self.probe, self.authority,
                           tuple(m.fact() for m in self.matches), self.error)


class ResolutionLine(_Line):
    type: Literal["resolution"]
    operation_id: Text
    at: AwareDatetime
    verdict: Literal[Verdict.VERIFIED_APPLIED, Verdict.VERIFIED_NOT_APPLIED]
    actor: Text
    note: str = ""

    def fact(self) -> Resolution:
        return Resolution(self.operation_id, utc(self.at), self.verdict, self.actor, self.note)


class ApprovalLine(_Line):
    type: Literal["approval"]
    operation_id: Text
    at: AwareDatetime
    actor: Text
    note: str = ""

    def fact(self) -> Approval:
        return Approval(self.operation_id, utc(self.at), self.actor, self.note)


class ExpectLine(_Line):
    type: Literal["expect"]
    operation_id: Text
    verdict: Verdict
    retry_allowed: bool | None = None
    findings: list[str] = []
    at: AwareDatetime | None = None


Event = Annotated[
    ProviderLine | IntentLine | AttemptLine | ReceiptLine | ProbeLine | ResolutionLine
    | ApprovalLine | ExpectLine,
    Field(discriminator="type"),
]
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)
KNOWN_TYPES = ("provider", "intent", "attempt", "receipt", "probe", "resolution", "approval",
               "expect")


def parse_line(raw: bytes, path: str, number: int) -> Event:
    """One line to one event, or a FixtureError saying what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FixtureError(path, number, f"not UTF-8 (byte {exc.start})") from None
    try:
        return _EVENT.validate_json(text)
    except ValidationError as exc:
        raise FixtureError(path, number, _explain(exc)) from None


def _explain(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    kind, where = first["type"], ".".join(str(p) for p in first["loc"])
    if kind == "json_invalid":
        return f"malformed JSON: {first['msg']}"
    if kind == "union_tag_not_found":
        return "missing field 'type'"
    if kind == "union_tag_invalid":
        return f"unknown type; expected one of {', '.join(KNOWN_TYPES)}"
    if not where or kind in ("model_type", "model_attributes_type"):
        return f"a line must be a JSON object with a 'type' ({first['msg']})"
    # The discriminator leads the location ("intent.at"): name the field, not the union arm.
    field = where.split(".", 1)[1] if "." in where else where
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"field '{field}': {first['msg']}{more}"


def read_events(path: Path) -> Iterator[tuple[int, Event]]:
    """(line number, event) for each non-blank line; stops at the first bad line by raising."""
    with path.open("rb") as stream:
        for number, raw in enumerate(_lines(stream, str(path)), start=1):
            if raw.strip():
                yield number, parse_line(raw, str(path), number)


def _lines(stream: Any, path: str) -> Iterator[bytes]:
    number = 0
    while True:
        raw: bytes = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise FixtureError(path, number, f"line longer than {MAX_LINE_BYTES} bytes")
        yield raw


def fixture_files(paths: list[Path]) -> list[Path]:
    """The files named, and every `*.ndjson` below the directories named, in a stable order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.rglob("*.ndjson")))
        else:
            found.append(path)
    return found
