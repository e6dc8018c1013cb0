"""Every error the reconciler raises on purpose: one base, one class per thing gone wrong.

Each error carries the operation id when there is one, and says what to do next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reconciler.schemas import RetryOut


class ReconcilerError(Exception):
    """Base of every error the reconciler raises on purpose."""

    def __init__(self, message: str, *, operation_id: str | None = None) -> None:
        super().__init__(message)
        self.operation_id = operation_id


class HashInputError(ReconcilerError):
    """Parameters to hash are not plain JSON: pass dicts, lists, str, int, float, bool or None."""


class IntentConflictError(ReconcilerError):
    """An intent with this operation id exists with another hash or key; use a new operation id."""


class AttemptConflictError(ReconcilerError):
    """This attempt number is already recorded with other facts; number the next attempt n+1."""


class UnknownOperationError(ReconcilerError):
    """No intent is recorded for this operation id; record the intent before anything else."""


class FixtureError(ReconcilerError):
    """A fixture line is malformed or invalid; fix the line the message names."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line
        self.reason = message


class StoreUnavailableError(ReconcilerError):
    """The receipt store cannot be reached; nothing was recorded, try again when it is back."""


class ServiceError(ReconcilerError):
    """The sidecar answered with a problem (RFC 9457); `problem` holds its type and detail."""

    def __init__(self, status: int, problem: dict[str, object],
                 operation_id: str | None = None) -> None:
        detail = problem.get("detail") or problem.get("title") or "no detail"
        super().__init__(f"sidecar answered {status}: {detail}", operation_id=operation_id)
        self.status = status
        self.problem = problem


class RetryRefusedError(ReconcilerError):
    """The retry gate refused this retry; do not dispatch. Follow `answer.reason`."""

    def __init__(self, operation_id: str, answer: RetryOut, reason: str) -> None:
        super().__init__(f"retry of {operation_id!r} refused: {reason}",
                         operation_id=operation_id)
        self.answer = answer
