"""What the model adapters' tests (test_runtime_openai.py, test_runtime_anthropic.py) share: the
request they send, bounded calls to a model, and the cancel-mid-stream scenario."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from reconciler.core.runs.messages import (
    Delta,
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    TextDelta,
    ToolSpec,
)
from reconciler.runtime.cancel import Cancelled, CancelSignal, cancellable

T = TypeVar("T")
#: Generous: a bound so that a broken retry wait fails the test instead of hanging it.
BOUND_S = 10.0

PAY = ToolSpec("pay", "Charge a card.", {"type": "object",
                                         "properties": {"amount": {"type": "integer"}}})
HELLO = ModelRequest("", (Message("user", (TextBlock("hello"),)),), ())


def run(awaitable: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(awaitable, BOUND_S)
    return asyncio.run(bounded())


async def complete(model: Any, request: ModelRequest = HELLO) -> ModelResponse:
    """One whole answer from `model` (an adapter: an async context manager), closed after."""
    async with model:
        response: ModelResponse = await model.complete(request)
        return response


async def stream(model: Any, request: ModelRequest = HELLO,
                 deltas: list[Delta] | None = None) -> ModelResponse:
    """One streamed answer from `model`, its deltas appended to `deltas`, closed after."""
    async with model:
        response: ModelResponse = await model.stream(
            request, (deltas if deltas is not None else []).append)
        return response


def cancel_mid_stream(model: Any, disconnected: threading.Event) -> None:
    """Cancel a stream of `model` (whose fake stalls after "a lo") at its first delta: it
    raises Cancelled with the reason, and the fake sees the connection closed."""

    async def scenario() -> None:
        signal = CancelSignal()
        deltas: list[Delta] = []
        arrived = asyncio.Event()

        def sink(delta: Delta) -> None:
            deltas.append(delta)
            arrived.set()

        async with model:
            call = asyncio.create_task(cancellable(model.stream(HELLO, sink), signal))
            await asyncio.wait_for(arrived.wait(), BOUND_S)
            assert deltas == [TextDelta(0, "a lo")]
            signal.cancel("the user pressed stop")
            with pytest.raises(Cancelled, match="the user pressed stop"):
                await call
            # Checked while the loop still runs: its shutdown would close the connection anyway.
            assert await asyncio.to_thread(disconnected.wait, BOUND_S), (
                "the fake still streams to a cancelled call")

    asyncio.run(scenario())
