"""Replaying NDJSON fixtures on a virtual clock, through the same ledger the service uses.

Each file gets its own in-memory store (`store.memory`), so files never see each other's
operations, and no file pays for a database. The
clock is the `at` of the latest line read; an `expect` may move it with its own `at`.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from reconciler.cli.fixtures import (
    ApprovalLine,
    AttemptLine,
    Event,
    ExpectLine,
    IntentLine,
    ProbeLine,
    ProviderLine,
    ReceiptLine,
    ResolutionLine,
    read_events,
    utc,
)
from reconciler.core.errors import FixtureError, IntentConflictError, ReconcilerError
from reconciler.ledger import Ledger
from reconciler.store.memory import MemoryStore


@dataclass(frozen=True, slots=True)
class ExpectResult:
    """One `expect` line and what the engine said."""

    path: str
    line: int
    operation_id: str
    expected: str
    got: str
    retry_expected: bool | None
    retry_allowed: bool
    findings: tuple[str, ...]
    missing_findings: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return (self.expected == self.got and not self.missing_findings
                and self.retry_expected in (None, self.retry_allowed))


@dataclass
class ReplayReport:
    results: list[ExpectResult] = field(default_factory=list)
    errors: list[FixtureError] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def failed(self) -> int:
        return len(self.results) - self.passed


class _VirtualClock:
    def __init__(self) -> None:
        self.now: datetime | None = None

    def __call__(self) -> datetime:
        if self.now is None:
            raise ReconcilerError("no time yet: an earlier line must carry 'at' (or give this "
                                  "line its own 'at')")
        return self.now


def replay_file(path: Path, report: ReplayReport) -> None:
    """Replay one file into `report`. At the first invalid line the file ends, with the error
    recorded and the results before it kept: nothing after it is evaluated."""
    clock = _VirtualClock()
    ledger = Ledger(MemoryStore(), clock)
    try:
        for number, event in read_events(path):
            at = getattr(event, "at", None)
            try:
                if at is not None:
                    clock.now = utc(at)
                result = _apply(ledger, event, str(path), number)
            except ReconcilerError as exc:
                if isinstance(exc, FixtureError):
                    raise
                raise FixtureError(str(path), number, str(exc)) from None
            except OverflowError as exc:
                # A valid line can still hold a time or number nothing can compute with: a
                # time before year 1 once in UTC, a window reaching past year 9999, an integer
                # past 64 bits.
                raise FixtureError(str(path), number, f"a time or number out of range ({exc}); "
                                   "check this line's values and its provider's durations"
                                   ) from None
            if result is not None:
                report.results.append(result)
    except FixtureError as exc:
        report.errors.append(exc)
    except OSError as exc:
        report.errors.append(FixtureError(str(path), 0, f"cannot read: {exc.strerror}"))


def _apply(ledger: Ledger, event: Event, path: str, number: int) -> ExpectResult | None:
    match event:
        case ProviderLine():
            ledger.store.put_contract(event.contract())
        case IntentLine():
            # A conflicting repeat is recorded as evidence and the first intent stands, as the
            # service's 409 leaves it.
            with suppress(IntentConflictError):
                ledger.record_intent(event.fact())
        case AttemptLine():
            ledger.record_attempt(event.fact())
        case ReceiptLine() | ProbeLine() | ResolutionLine() | ApprovalLine():
            ledger.record_evidence(event.fact())
        case ExpectLine():
            decision = ledger.judge(event.operation_id,
                                    utc(event.at) if event.at else None).decision
            return ExpectResult(
                path=path, line=number, operation_id=event.operation_id,
                expected=event.verdict.value, got=decision.verdict.value,
                retry_expected=event.retry_allowed, retry_allowed=decision.retry_allowed,
                findings=decision.findings,
                missing_findings=tuple(f for f in event.findings if f not in decision.findings))
    return None


def replay(paths: list[Path]) -> ReplayReport:
    """Replay every file; an invalid line ends its own file, not the run."""
    report = ReplayReport()
    for path in paths:
        replay_file(path, report)
    return report
