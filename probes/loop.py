"""The probe loop: one daemon thread running an event loop, on which the sweep's calls to
asynchronous probes (`probes.base.AsyncProbe`) run as tasks.

    sweeper thread ── submit(coroutine) ──▶ probe loop thread: one task per call,
          ▲                                  every socket in one epoll wait
          └──── answers, through each call's concurrent Future ◀──┘

A thread per call in flight blocks in `recv`, and each answer wakes its own thread and hands it
the GIL; one loop wakes once for every answer that has come (bench/README.md, `reconcile`).
uvloop runs the loop where it is installed (as it runs the service's), asyncio's own elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # Windows: no uvloop
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class ProbeLoop:
    """An event loop on a daemon thread, started at the first call; `close` ends it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def submit(self, call: Coroutine[Any, Any, T]) -> Future[T]:
        """Run `call` as a task on the loop; its result (or exception) comes in the future."""
        with self._lock:
            if self._loop is None:
                self._loop = _new_loop()
                self._thread = threading.Thread(target=self._loop.run_forever,
                                                name="probe-loop", daemon=True)
                self._thread.start()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(call, loop)

    def runs_here(self) -> bool:
        """Whether the calling thread is this loop's."""
        return self._thread is not None and self._thread is threading.current_thread()

    def close(self) -> None:
        """Cancel the calls still running and stop the loop (a call cut off by its caller is
        bounded by its own deadline; here it is given up)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        # A call that ignores its cancellation: the loop stops around it.
        with contextlib.suppress(TimeoutError):
            asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()


#: The process's probe loop for blocking callers (a probe's `probe`, `run_probe`,
#: `check-config --live`): they read over the same asyncio wire as the sweep. Started at its
#: first call; a daemon thread, so it never holds up the process's exit.
_shared = ProbeLoop()


def wait_for(call: Coroutine[Any, Any, T]) -> T:
    """Run `call` on the shared probe loop and wait for its result, from a thread other than
    the loop's own (there the wait would never end: refused)."""
    if _shared.runs_here():
        call.close()
        raise RuntimeError("a blocking probe call on the probe loop itself: await aprobe")
    return _shared.submit(call).result()


async def _cancel_all() -> None:
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
