"""A probe that answers what the test scripted, and remembers what it was asked."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeAlias

from probes.base import ProbeResult, ProbeTarget
from reconciler.core.sight import Sight

#: One scripted answer: evidence to return, or an exception to raise (a probe breaking its
#: contract, which the reconciler must turn into evidence of nothing).
ScriptedResult: TypeAlias = ProbeResult | BaseException

#: What a `FakeProbe` sees unless told otherwise: no action, by no identifier.
SEES_NOTHING = Sight()


class FakeProbe:
    """A `probes.base.Probe` answering from a script, or from a function of the target.

    Scripted answers are given out in order, one per call, the last one again and again once
    the script runs out. `answer` computes each answer from the call's target instead (and may
    raise). `calls` lists the targets asked about, in order, from whichever threads called.

        FakeProbe(Observation("op-1", clock(), "fake", Authority.AUTHORITATIVE))
        FakeProbe(TimeoutError("provider hangs"), name="flaky")      # raises on every call
        FakeProbe(answer=lambda t: Observation(t.operation_id, clock(), "fake", ...))

    `sight` is what it covers and finds effects by (SPEC section 3); by default nothing, so the
    sweep records its empty answers as `unavailable`: give it the actions and identifiers of
    the operations whose zeros it stands for, `Sight(frozenset({"charge"}),
    frozenset({Carried.IDEMPOTENCY_KEY}))`. `sight=None` leaves the attribute out, as a
    plugin's probe that declares no sight: the reconciler must treat it as seeing nothing.

    `wait_for_call` blocks until a call has begun, for a test that acts while one is in flight
    (an `answer` that sleeps or waits keeps the call under way).
    """

    #: Set in `__init__` unless `sight=None`: then reading it raises AttributeError.
    sight: Sight

    def __init__(self, *script: ScriptedResult,
                 answer: Callable[[ProbeTarget], ProbeResult] | None = None,
                 name: str = "fake", sight: Sight | None = SEES_NOTHING) -> None:
        if bool(script) == (answer is not None):
            raise ValueError("a FakeProbe takes scripted answers or an `answer` function")
        self.name = name
        if sight is not None:
            self.sight = sight
        self.calls: list[ProbeTarget] = []
        self._script = list(script)
        self._answer = answer
        self._lock = threading.Lock()
        self._called = threading.Event()

    def probe(self, target: ProbeTarget) -> ProbeResult:
        with self._lock:
            self.calls.append(target)
            reply = self._script.pop(0) if len(self._script) > 1 else None
            if reply is None and self._script:
                reply = self._script[0]
        self._called.set()
        if reply is None:
            assert self._answer is not None  # the constructor saw to one or the other
            return self._answer(target)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def wait_for_call(self, timeout: float) -> bool:
        """True once a call has begun (at once if one already has); False after `timeout` s."""
        return self._called.wait(timeout)

    @property
    def asked(self) -> list[str]:
        """The operation ids of `calls`, in order."""
        return [target.operation_id for target in self.calls]
