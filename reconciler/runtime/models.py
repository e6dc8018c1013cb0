"""What the run loop knows of a model: one `complete` call, how it fails for good, and for a
model that streams, the deltas of its answer as they arrive.

The conversation it is given and answers with is plain data (`reconciler.core.runs.messages`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from reconciler.core.errors import ReconcilerError
from reconciler.core.runs.messages import Delta, ModelRequest, ModelResponse


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


#: Called with each delta in the order the provider sent it. It runs inside the model call: an
#: exception it raises ends the call (the stream is closed) and propagates.
DeltaSink = Callable[[Delta], None]


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A model that can also stream: `stream` hands each delta to `on_delta` as it arrives and
    returns the same response `complete` would. Cancelling the awaiting task closes the stream.
    A failure after the first delta is not retried (the sink has seen part of an answer)."""

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse: ...
