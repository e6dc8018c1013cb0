"""What the run loop knows of a model: one `complete` call, and how it fails for good.

The conversation it is given and answers with is plain data (`reconciler.runs.messages`).
"""

from __future__ import annotations

from typing import Protocol

from reconciler.errors import ReconcilerError
from reconciler.runs.messages import ModelRequest, ModelResponse


class ModelCallError(ReconcilerError):
    """A model call failed for good (retries, if any, spent); `status` and `error_type` say why.

    `status` is the HTTP status (None when no answer came), `error_type` the provider's own
    error type (e.g. "overloaded_error"), `attempts` how many calls were made.
    """

    def __init__(self, message: str, *, status: int | None = None,
                 error_type: str | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.attempts = attempts


class Model(Protocol):
    """One completion per call. Cancelling the awaiting task cancels the call: an
    implementation lets CancelledError through and leaves nothing running."""

    async def complete(self, request: ModelRequest) -> ModelResponse: ...
