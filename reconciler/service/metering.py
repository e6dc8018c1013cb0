"""Store latency and reconcile lag: the metrics the service measures itself. (Probe calls and
escalations are counted where they happen, in reconciler.sweep.)

Wrapping the store's and the leases' methods in one place times every call, whoever makes it
(routes, the retry gate, the sweeper), without touching their code.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from reconciler.metrics import STORE_DURATION
from reconciler.ports import Leases

T = TypeVar("T")


def timed_calls(target: T) -> T:
    """`target` with each public method timed into reconciler_store_duration_seconds.
    Idempotent: a method that is already timed is left as it is."""
    for name, member in vars(type(target)).items():
        if name.startswith("_") or name == "session" or not callable(member):
            continue
        method = getattr(target, name)
        if not hasattr(method, "__wrapped__"):
            setattr(target, name, _timed(name, method))
    return target


def _timed(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    histogram = STORE_DURATION.labels(method=name)

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            histogram.observe(time.perf_counter() - started)

    return call


def reconcile_lag_s(leases: Leases, now: datetime) -> float:
    """Seconds the longest-waiting due operation has waited (0 when none is due)."""
    oldest = leases.oldest_due(now)
    if oldest is None:
        return 0.0
    return max(0.0, (now - oldest).total_seconds())
