"""Timed loops in this process: one call after another, on one thread or several, for a fixed
time, with every call's latency."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.harness import BenchError, rate

#: Call numbers, unique in the process: every loop's calls may build unique ids from them.
_NUMBERS = itertools.count()


@dataclass(slots=True)
class LoopRun:
    """Calls completed, the wall time they took, and each call's latency in seconds."""

    calls: int = 0
    elapsed_s: float = 0.0
    samples_s: list[float] = field(default_factory=list)

    def add(self, other: LoopRun) -> None:
        self.calls += other.calls
        self.elapsed_s += other.elapsed_s
        self.samples_s += other.samples_s

    @property
    def per_s(self) -> float:
        return rate(self.calls, self.elapsed_s)


def run_for(call: Callable[[int], object], seconds: float, threads: int = 1) -> LoopRun:
    """Call `call(n)` (n unique in the process) back to back on `threads` threads for
    `seconds`. The wall time runs from the common start to the last thread's last call."""
    start = threading.Barrier(threads + 1)
    results: list[LoopRun] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        run = LoopRun()
        start.wait()
        end = time.perf_counter() + seconds
        try:
            while (now := time.perf_counter()) < end:
                call(next(_NUMBERS))
                run.samples_s.append(time.perf_counter() - now)
        except BaseException as exc:  # re-raised in the caller's thread below
            with lock:
                failures.append(exc)
        run.calls = len(run.samples_s)
        with lock:
            results.append(run)

    workers = [threading.Thread(target=worker, name=f"bench-loop-{i}", daemon=True)
               for i in range(threads)]
    for worker_thread in workers:
        worker_thread.start()
    start.wait()
    began = time.perf_counter()
    for worker_thread in workers:
        # Each thread stops at its deadline plus one call; a call hung for a minute is a bug.
        worker_thread.join(seconds + 60)
        if worker_thread.is_alive():
            raise BenchError(f"a measured call did not return within {seconds + 60:g} s")
    elapsed = time.perf_counter() - began
    if failures:
        raise BenchError(f"a measured call failed: {failures[0]!r}") from failures[0]
    total = LoopRun(elapsed_s=elapsed)
    for run in results:
        total.calls += run.calls
        total.samples_s += run.samples_s
    return total


def alternate(first: Callable[[], LoopRun], second: Callable[[], LoopRun],
              rounds: int) -> tuple[LoopRun, LoopRun]:
    """Run `first` and `second` in turn, `rounds` times each, and add up each one's runs: on a
    shared machine, load that comes and goes then falls on both alike."""
    total_first, total_second = LoopRun(), LoopRun()
    for _ in range(rounds):
        total_first.add(first())
        total_second.add(second())
    return total_first, total_second
