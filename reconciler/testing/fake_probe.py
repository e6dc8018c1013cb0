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
    frozenset({Carried.IDEMPOTENCY_KEY}))`.
    """

    def __init__(self, *script: ScriptedResult,
                 answer: Callable[[ProbeTarget], ProbeResult] | None = None,
                 name: str = "fake", sight: Sight | None = None) -> None:
        if bool(script) == (answer is not None):
            raise ValueError("a FakeProbe takes scripted answers or an `answer` function")
        self.name = name
        self.sight = sight or Sight()
        self.calls: list[ProbeTarget] = []
        self._script = list(script)
        self._answer = answer
        self._lock = threading.Lock()

    def probe(self, target: ProbeTarget) -> ProbeResult:
        with self._lock:
            self.calls.append(target)
            reply = self._script.pop(0) if len(self._script) > 1 else None
            if reply is None and self._script:
                reply = self._script[0]
        if reply is None:
            assert self._answer is not None  # the constructor saw to one or the other
            return self._answer(target)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    @property
    def asked(self) -> list[str]:
        """The operation ids of `calls`, in order."""
        return [target.operation_id for target in self.calls]
