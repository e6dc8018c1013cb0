"""The cancellation signal, and `cancellable` running one call against it: the call is cancelled
and cleans up before `Cancelled` is raised; an HTTP request in flight is aborted."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx
import pytest
from fastapi import FastAPI, Request

from reconciler.runtime.cancel import Cancelled, CancelSignal, cancellable
from reconciler.testing.patience import PATIENCE_S

from service_harness import serving

T = TypeVar("T")
DEADLINE_S = PATIENCE_S  # bounds every scenario: a hang fails the test instead of stalling the run


def run(scenario: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(scenario, DEADLINE_S))


async def cleans_up_slowly(cleaned: list[str]) -> None:
    """Sleeps until cancelled, then takes a few loop turns to clean up."""
    try:
        await asyncio.sleep(DEADLINE_S * 2)
    finally:
        await asyncio.sleep(0.05)
        cleaned.append("cleaned up")


def test_the_first_reason_wins() -> None:
    signal = CancelSignal()
    assert not signal.cancelled and signal.reason is None
    signal.cancel("user pressed stop")
    signal.cancel("shutdown")
    assert signal.cancelled and signal.reason == "user pressed stop"


def test_wait_returns_the_reason_whether_it_fires_before_or_during_the_wait() -> None:
    async def scenario() -> tuple[str, str]:
        signal = CancelSignal()
        waiting = asyncio.create_task(signal.wait())
        await asyncio.sleep(0)
        assert not waiting.done()
        signal.cancel("stop")
        return await waiting, await signal.wait()

    assert run(scenario()) == ("stop", "stop")


def test_a_call_that_finishes_returns_its_result() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert run(cancellable(answer(), CancelSignal())) == 42


def test_exceptions_of_the_call_propagate_unchanged() -> None:
    error = ValueError("tool failed")

    async def failing() -> None:
        raise error

    with pytest.raises(ValueError) as raised:
        run(cancellable(failing(), CancelSignal()))
    assert raised.value is error


def test_a_signal_already_fired_starts_nothing() -> None:
    started: list[str] = []

    async def call() -> None:
        started.append("started")

    signal = CancelSignal()
    signal.cancel("stop")
    coroutine = call()
    with pytest.raises(Cancelled) as raised:
        run(cancellable(coroutine, signal))
    assert raised.value.reason == "stop" and started == []
    # Closed rather than dropped: no "coroutine was never awaited" warning.
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED


def test_the_call_is_cancelled_and_its_cleanup_finishes_before_cancelled_is_raised() -> None:
    cleaned: list[str] = []

    async def scenario() -> None:
        signal = CancelSignal()
        asyncio.get_running_loop().call_soon(signal.cancel, "stop")
        await cancellable(cleans_up_slowly(cleaned), signal)

    with pytest.raises(Cancelled) as raised:
        run(scenario())
    assert raised.value.reason == "stop" and cleaned == ["cleaned up"]


def test_a_cancel_from_another_thread_wakes_the_waiting_loop() -> None:
    cleaned: list[str] = []
    signal = CancelSignal()

    def fire_once_the_loop_sleeps() -> None:
        time.sleep(0.1)  # lets the loop block in select: only a thread-safe wakeup gets it out
        signal.cancel("from a handler thread")

    async def scenario() -> None:
        call = asyncio.create_task(cancellable(cleans_up_slowly(cleaned), signal))
        threading.Thread(target=fire_once_the_loop_sleeps).start()
        await call

    with pytest.raises(Cancelled) as raised:
        run(scenario())
    assert raised.value.reason == "from a handler thread" and cleaned == ["cleaned up"]


def test_cancelling_the_caller_cancels_the_call_and_propagates_after_its_cleanup() -> None:
    cleaned: list[str] = []

    async def scenario() -> None:
        caller = asyncio.create_task(cancellable(cleans_up_slowly(cleaned), CancelSignal()))
        await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert cleaned == ["cleaned up"]

    run(scenario())


def test_an_http_request_in_flight_is_aborted() -> None:
    started, disconnected = threading.Event(), threading.Event()
    app = FastAPI()

    @app.get("/slow")
    async def slow(request: Request) -> dict[str, str]:
        started.set()
        for _ in range(int(DEADLINE_S / 0.01)):
            if await request.is_disconnected():
                disconnected.set()
                break
            await asyncio.sleep(0.01)
        return {}

    async def scenario(url: str) -> None:
        signal = CancelSignal()
        async with httpx.AsyncClient(timeout=DEADLINE_S * 2) as http:
            call = asyncio.create_task(cancellable(http.get(f"{url}/slow"), signal))
            assert await asyncio.to_thread(started.wait, DEADLINE_S)
            signal.cancel("stop")
            with pytest.raises(Cancelled):
                await call

    with serving(app) as url:
        run(scenario(url))
        assert disconnected.wait(DEADLINE_S), "the server never saw the client go away"
