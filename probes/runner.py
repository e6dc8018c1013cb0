"""Calling probes on behalf of the reconciler, holding each to the `Probe` contract.

A third-party probe may raise, answer nonsense or hang despite the contract; the reconciler must
still get evidence it can trust, so such an answer becomes an `unavailable` observation (proves
nothing) instead of an exception that stops a reconcile pass, a forged fact in the store, or a
pass that never ends.

It also holds each empty read to what the probe could see (`seen`, SPEC section 3): a zero from a
probe that does not cover the operation's action, or that finds effects by something the request
did not carry, is recorded as an `unavailable` observation saying so.
"""

from __future__ import annotations

import inspect
import logging
import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from datetime import datetime
from functools import cache
from typing import cast

from probes.base import AsyncProbe, Probe, ProbeResult, ProbeTarget, sight_of, utc_now
from probes.loop import ProbeLoop
from reconciler.core.domain import Authority, Facts, Intent, Observation, Receipt
from reconciler.core.sight import blind_error, blind_to

log = logging.getLogger(__name__)


def run_probe(probe: Probe, target: ProbeTarget,
              clock: Callable[[], datetime] = utc_now) -> ProbeResult:
    """`probe.probe(target)`, or an `unavailable` observation if it raised or broke the contract."""
    try:
        result = probe.probe(target)
    except Exception as exc:
        return _raised(probe, target, clock, exc)
    return _held(probe, target, clock, result)


async def run_probe_async(probe: AsyncProbe, target: ProbeTarget,
                          clock: Callable[[], datetime] = utc_now) -> ProbeResult:
    """`run_probe` with `await probe.aprobe(target)`; the future of its task never holds an
    exception, not even a cancellation's."""
    try:
        result = await probe.aprobe(target)
    except BaseException as exc:  # as on ProbeThreads' threads: evidence of nothing
        return _raised(probe, target, clock, exc)
    return _held(probe, target, clock, result)


def _raised(probe: Probe, target: ProbeTarget, clock: Callable[[], datetime],
            exc: BaseException) -> Observation:
    # The type only: an exception's message may quote a request, a header or a body.
    log.warning("probe %r raised %s", probe.name, type(exc).__name__)
    return _unavailable(probe, target, clock, f"probe raised {type(exc).__name__}")


def _held(probe: Probe, target: ProbeTarget, clock: Callable[[], datetime],
          result: object) -> ProbeResult:
    """`result`, or an `unavailable` observation if it breaks the probe contract."""
    problem = _contract_problem(probe, target, result)
    if problem is not None:
        log.warning("probe %r broke its contract: %s", probe.name, problem)
        return _unavailable(probe, target, clock, f"invalid probe result: {problem}")
    assert isinstance(result, ProbeResult)
    return result


#: The authorities whose empty read is a zero (SPEC section 3).
_ZEROS = frozenset({Authority.AUTHORITATIVE, Authority.LAGGING})


def seen(probe: Probe, intent: Intent, answer: ProbeResult,
         ref_returned: Callable[[], bool]) -> ProbeResult:
    """`answer`, unless it is an empty read by a probe that could not have seen `intent`'s
    effect (`blind_to`: scope or correlation): then the `unavailable` observation that stands
    for it, whose error names the question (`blind_error`). A read with matches keeps its
    authority, and a receipt stays a receipt. `ref_returned` says whether the provider returned
    a reference for this operation; it is asked only of a probe that finds effects by one.
    A `weak` zero is left as it is: it proves nothing already, and says so."""
    if not isinstance(answer, Observation) or answer.matches or answer.error is not None \
            or answer.authority not in _ZEROS:
        return answer
    blind = blind_to(sight_of(probe), intent, ref_returned=ref_returned)
    if blind is None:
        return answer
    return Observation(answer.operation_id, answer.at, answer.probe, Authority.UNAVAILABLE,
                       error=blind_error(blind, probe.name, intent))


def ref_returned(facts: Facts) -> bool:
    """The provider returned a reference for this operation: an attempt's receipt, or a
    receipt (a replay, a lookup, a webhook) gave a `provider_ref`."""
    return any(a.receipt is not None and a.receipt.provider_ref for a in facts.attempts) or any(
        r.provider_ref for r in facts.of(Receipt))


def run_probes(probes: Iterable[Probe], target: ProbeTarget,
               clock: Callable[[], datetime] = utc_now) -> list[ProbeResult]:
    """Every probe once, in order; each is bounded by its own retry policy."""
    return [run_probe(probe, target, clock) for probe in probes]


#: A call to make and where its answer goes.
_Task = tuple[Callable[[], ProbeResult], Future[ProbeResult]]


class ProbeThreads:
    """Probe calls on daemon threads, each thread reused from call to call; an asynchronous
    probe's calls (`AsyncProbe`) as tasks on one probe loop (`probes/loop.py`) instead.

    The caller holds a call to its time limit (`Future.result(timeout)`, or its own clock) and
    may abandon it: the call keeps its thread until it returns, if ever, while other calls get
    other threads, so a hung provider never starves the rest; being a daemon, an abandoned
    call's thread never holds up the process's exit. Idle threads end after `idle_s`.
    """

    def __init__(self, idle_s: float = 30.0) -> None:
        self.idle_s = idle_s
        self._loop = ProbeLoop()
        self._idle: list[queue.SimpleQueue[_Task | None]] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, probe: Probe, target: ProbeTarget,
               clock: Callable[[], datetime] = utc_now) -> Future[ProbeResult]:
        """`run_probe` on one of the threads (`run_probe_async` on the probe loop for an
        asynchronous probe); the future never holds an exception."""
        if _asynchronous(type(probe)):
            return self._loop.submit(run_probe_async(cast(AsyncProbe, probe), target, clock))

        def call() -> ProbeResult:
            try:
                return run_probe(probe, target, clock)
            except BaseException as exc:  # SystemExit and the like: here they would only
                # end this thread, and the caller would wait out its limit for nothing
                return _unavailable(probe, target, clock, f"probe raised {type(exc).__name__}")

        answer: Future[ProbeResult] = Future()
        self._inbox().put((call, answer))
        return answer

    def close(self) -> None:
        """End the idle threads now, and each busy one when its call returns; end the probe
        loop, cancelling the calls still on it."""
        self._loop.close()
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)

    def _inbox(self) -> queue.SimpleQueue[_Task | None]:
        with self._lock:
            if self._idle:
                return self._idle.pop()  # the most recently idle: the others may expire
        inbox: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        threading.Thread(target=self._serve, args=(inbox,), name="probe", daemon=True).start()
        return inbox

    def _serve(self, inbox: queue.SimpleQueue[_Task | None]) -> None:
        while True:
            try:
                task = inbox.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if any(idle is inbox for idle in self._idle):
                        self._idle.remove(inbox)
                        return
                continue  # handed a call just now: it is on its way
            if task is None:
                return
            call, answer = task
            result = call()
            # Idle again before the caller hears: its next call can have this thread.
            with self._lock:
                stay = not self._closed
                if stay:
                    self._idle.append(inbox)
            answer.set_result(result)
            del task, call, answer, result  # an abandoned call's result is not kept while idle
            if not stay:
                return


@cache
def _asynchronous(kind: type) -> bool:
    # What isinstance(probe, AsyncProbe) tells, once per class: a check against a runtime
    # protocol took 16 us, on every probe call.
    return inspect.iscoroutinefunction(getattr(kind, "aprobe", None))


def _contract_problem(probe: Probe, target: ProbeTarget, result: object) -> str | None:
    if not isinstance(result, ProbeResult):
        return f"{type(result).__name__} is not an Observation or a Receipt"
    if result.operation_id != target.operation_id:
        return "it is about another operation"
    if result.at.tzinfo is None:
        return "its time has no timezone"
    if isinstance(result, Observation):
        if result.probe != probe.name:
            return f"it is signed {result.probe!r}"
        if result.authority is Authority.HUMAN:
            return "a probe cannot claim a human's authority"
        if result.authority is Authority.UNAVAILABLE and result.matches:
            return "an unavailable observation cannot carry matches"
    return None


def _unavailable(probe: Probe, target: ProbeTarget, clock: Callable[[], datetime],
                 error: str) -> Observation:
    return Observation(target.operation_id, clock(), probe.name, Authority.UNAVAILABLE,
                       error=error)
