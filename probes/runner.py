"""Calling probes on behalf of the reconciler, holding each to the `Probe` contract.

A third-party probe may raise or answer nonsense despite the contract; the reconciler must still
get evidence it can trust, so such an answer becomes an `unavailable` observation (proves nothing)
instead of an exception that stops a reconcile pass or a forged fact in the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime

from probes.base import Probe, ProbeTarget, utc_now
from reconciler.domain import Authority, Observation, Receipt

log = logging.getLogger(__name__)


def run_probe(probe: Probe, target: ProbeTarget,
              clock: Callable[[], datetime] = utc_now) -> Observation | Receipt:
    """`probe.probe(target)`, or an `unavailable` observation if it raised or broke the contract."""
    try:
        result = probe.probe(target)
    except Exception as exc:
        # The type only: an exception's message may quote a request, a header or a body.
        log.warning("probe %r raised %s", probe.name, type(exc).__name__)
        return _unavailable(probe, target, clock, f"probe raised {type(exc).__name__}")
    problem = _contract_problem(probe, target, result)
    if problem is not None:
        log.warning("probe %r broke its contract: %s", probe.name, problem)
        return _unavailable(probe, target, clock, f"invalid probe result: {problem}")
    return result


def run_probes(probes: Iterable[Probe], target: ProbeTarget,
               clock: Callable[[], datetime] = utc_now) -> list[Observation | Receipt]:
    """Every probe once, in order; each is bounded by its own retry policy."""
    return [run_probe(probe, target, clock) for probe in probes]


def _contract_problem(probe: Probe, target: ProbeTarget, result: object) -> str | None:
    if not isinstance(result, Observation | Receipt):
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
