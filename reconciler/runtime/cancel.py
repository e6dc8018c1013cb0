"""Cancelling a run: one signal per run, observed by every model and tool call in flight.

`cancellable` runs one call against the signal. When the signal fires it cancels the call and
waits for the call's own cleanup (a child process reaped, an HTTP connection closed) before it
raises `Cancelled`, so nothing the call started outlives it.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable
from contextlib import suppress
from typing import Any, TypeVar

T = TypeVar("T")


class Cancelled(Exception):
    """The run was cancelled while this call was in flight; the call's effect is unknown unless
    it said otherwise."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the run was cancelled ({reason}); whatever this call started may or "
                         "may not have taken effect: reconcile it before repeating it")
        self.reason = reason


class CancelSignal:
    """One run's cancellation: set once (with a reason), observed by every model and tool call.

    `cancel` may be called from any thread, or from a signal handler, while event loops in
    other threads wait on the signal.
    """

    def __init__(self) -> None:
        # Re-entrant: a signal handler may call `cancel` while this thread is inside `cancel`.
        self._lock = threading.RLock()
        self._reason: str | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[str]]] = []

    def cancel(self, reason: str) -> None:
        """Fire the signal; later calls change nothing (the first reason wins)."""
        with self._lock:
            if self._reason is not None:
                return
            # The reason is set before the waiters are taken: `wait` registers first and
            # checks the reason second, so every waiter is either woken here or sees it.
            self._reason = reason
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            with suppress(RuntimeError):  # its loop is closed: nobody is left to wake
                loop.call_soon_threadsafe(_resolve, waiter, reason)

    @property
    def cancelled(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        return self._reason

    async def wait(self) -> str:
        """The reason, once the signal has fired."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[str] = loop.create_future()
        entry = (loop, waiter)
        with self._lock:
            self._waiters.append(entry)
        try:
            if self._reason is not None:
                return self._reason
            return await waiter
        finally:
            with self._lock, suppress(ValueError):  # already taken by `cancel`
                self._waiters.remove(entry)


def _resolve(waiter: asyncio.Future[str], reason: str) -> None:
    if not waiter.done():
        waiter.set_result(reason)


async def cancellable(awaitable: Awaitable[T], signal: CancelSignal) -> T:
    """Await `awaitable` unless `signal` fires first; then cancel it, wait for its cleanup to
    finish, and raise `Cancelled`.

    A signal that has already fired raises `Cancelled` without starting the call. The call's own
    exceptions propagate unchanged, and so does a cancellation of the caller (after the call has
    been cancelled and has cleaned up). A call that completes in the same instant as the signal
    fires returns its result: its effect is known.
    """
    reason = signal.reason
    if reason is not None:
        await _discard(awaitable)
        raise Cancelled(reason)
    call = asyncio.ensure_future(awaitable)
    fired = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({call, fired}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        call.cancel()
        await settle(call)
        _failure(call)
        raise
    finally:
        fired.cancel()
    if call.done():
        return call.result()
    call.cancel()
    await settle(call)
    raise Cancelled(fired.result()) from _failure(call)


async def settle(future: asyncio.Future[Any]) -> None:
    """Wait until `future` is done even if the caller is cancelled meanwhile: cleanup cut short
    leaves processes or connections behind. Such a cancellation is raised once it is done; the
    future's outcome is left for the caller to read."""
    interrupted: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.wait({future})
        except asyncio.CancelledError as exc:
            interrupted = exc
    if interrupted is not None:
        raise interrupted


async def _discard(awaitable: Awaitable[Any]) -> None:
    """Make sure a call the signal forbids does not run."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()  # never started, so nothing to clean up nor a "never awaited" warning
    elif asyncio.isfuture(awaitable):  # already running: stop it like any call in flight
        awaitable.cancel()
        await settle(awaitable)
        _failure(awaitable)


def _failure(call: asyncio.Future[Any]) -> BaseException | None:
    """The exception a cancelled call ended with other than its cancellation, if any (reading it
    also keeps asyncio from logging it as never retrieved)."""
    return None if call.cancelled() else call.exception()
