"""Every error the reconciler raises on purpose: one base, one class per thing gone wrong.

Each error carries the operation id when there is one, and says what to do next.
"""

from __future__ import annotations

from collections.abc import Sequence


class ReconcilerError(Exception):
    """Base of every error the reconciler raises on purpose."""

    def __init__(self, message: str, *, operation_id: str | None = None) -> None:
        super().__init__(message)
        self.operation_id = operation_id


class HashInputError(ReconcilerError):
    """Parameters to hash are not plain JSON: pass dicts, lists, str, int, float, bool or None."""


class IntentConflictError(ReconcilerError):
    """An intent with this operation id exists with another hash or key; use a new operation id."""


class RetryNotGrantedError(ReconcilerError):
    """Attempt n>=2 without the live retry grant for that number: do not send; ask /retry.

    Raised by the retry gate (an opening refused), and by the client when the sidecar answers
    with the `retry-not-granted` problem type."""

    @classmethod
    def opening(cls, operation_id: str, number: int) -> RetryNotGrantedError:
        """Opening attempt `number` was refused: no grant for it is held by the caller."""
        return cls(f"attempt {number} of {operation_id!r} has no retry grant held by this "
                   "caller (none asked, expired, another's, or a wrong token): do not send; "
                   "ask /retry first (recorded as a refused retry)", operation_id=operation_id)

    @classmethod
    def held(cls, operation_id: str, number: int, allowed: int | None) -> RetryNotGrantedError:
        """The live grant's own holder was refused attempt `number`: it allows `allowed`, or
        the verdict it rested on has changed."""
        why = (f"it allows attempt {allowed} (a report sent without the grant took number "
               f"{number})" if allowed != number else
               "new evidence changed the verdict it rested on; ask /retry again")
        return cls(f"attempt {number} of {operation_id!r} cannot be opened under this grant, "
                   f"do not send it: {why}", operation_id=operation_id)


class UnknownOperationError(ReconcilerError):
    """No intent is recorded for this operation id; record the intent before anything else."""


class FixtureError(ReconcilerError):
    """A fixture line is malformed or invalid; fix the line the message names."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line
        self.reason = message


class FactTimeError(ReconcilerError):
    """A fact's reported time cannot be used (in the future, or out of range); omit it."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class StoreUnavailableError(ReconcilerError):
    """The receipt store cannot be reached; nothing was recorded, try again when it is back."""


class StoreUrlError(ReconcilerError):
    """The store URL names a database the reconciler does not keep receipts in; use a
    sqlite:/// or postgresql:// URL."""


class ServiceError(ReconcilerError):
    """The sidecar answered with a problem (RFC 9457); `problem` holds its type and detail."""

    def __init__(self, status: int, problem: dict[str, object],
                 operation_id: str | None = None) -> None:
        detail = problem.get("detail") or problem.get("title") or "no detail"
        super().__init__(f"sidecar answered {status}: {detail}", operation_id=operation_id)
        self.status = status
        self.problem = problem


class RetryRefusedError(ReconcilerError):
    """The retry gate refused this retry; do not dispatch. Follow `reason`."""

    def __init__(self, operation_id: str, verdict: str, reason: str,
                 findings: Sequence[str] = ()) -> None:
        super().__init__(f"retry of {operation_id!r} refused: {reason}",
                         operation_id=operation_id)
        self.verdict = verdict
        self.reason = reason
        self.findings = tuple(findings)

    def __reduce__(self) -> tuple[type[RetryRefusedError], tuple[str, str, str, tuple[str, ...]]]:
        # A durable engine keeps a failed step's error pickled and raises it again on replay
        # (DBOS's default serializer): it must come back whole, verdict and findings included.
        return type(self), (self.operation_id or "", self.verdict, self.reason, self.findings)


class RunKeyError(ReconcilerError):
    """No usable run key: set RECONCILER_RUN_KEY (`reconciler run-key` prints a new one)."""


class RunError(ReconcilerError):
    """Base of the agent runtime's errors; each carries the run id."""

    def __init__(self, run_id: str, message: str) -> None:
        super().__init__(f"run {run_id!r}: {message}")
        self.run_id = run_id


class UnknownRunError(RunError):
    """No run has this id; create the run first."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id, "no such run")


class IllegalTransitionError(RunError):
    """The run cannot move between these states; nothing was written. Check its state first."""

    def __init__(self, run_id: str, src: object, dst: object, why: str) -> None:
        super().__init__(run_id, f"illegal transition {src} -> {dst}: {why}")
        self.src, self.dst = src, dst


class RunConflictError(RunError):
    """Another worker wrote to this run first; reload the run and decide again."""


class ContinuationError(RunError):
    """The continue response does not answer the run's pending continue request; send its id."""


class ApprovalError(RunError):
    """No pending approval matches this resume token; fetch the run for the current one."""


class DecisionNotAllowedError(ApprovalError):
    """The resume token is right but the decision is not one the waiting call allows (a call
    never sent takes approve or reject); send one of those the message lists."""


class AgentLoadError(ReconcilerError):
    """The agent named as package.module:attribute cannot be loaded; fix the name or module."""
