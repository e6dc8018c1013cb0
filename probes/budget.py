"""A request budget per provider, shared by every probe that names it, so a backlog of due
operations cannot spend the provider's rate limit (and then the agents' own calls fail).

A budget is a token bucket: `per_minute` requests a minute, up to `burst` at once. A rate-limit
answer (429, or GitHub's 403 with `x-ratelimit-remaining: 0`) closes the budget until the time
the provider named (`Retry-After`, `x-ratelimit-reset`), for every probe sharing it:

    t=0   probe A: 429, Retry-After: 30  -> budget closed until t=30
    t=5   probe B: asks the budget       -> waits, or gives up if its deadline is before t=30
    t=30  the budget opens again

A read the budget cannot fit before its deadline is cut: no zero (SPEC section 3).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class BudgetSpent(Exception):
    """No request fits in the budget before the deadline; `ready_in`: seconds until one does
    (the provider's own pause, or the budget's pace)."""

    def __init__(self, message: str, ready_in: float) -> None:
        super().__init__(message)
        self.ready_in = ready_in


@dataclass(slots=True)
class Budget:
    """One provider's budget; `monotonic` is injectable for tests."""

    per_minute: float
    burst: float = 1.0
    monotonic: Callable[[], float] = time.monotonic
    _tokens: float = field(init=False)
    _stamp: float = field(init=False)
    _closed_until: float = field(init=False, default=0.0)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._tokens = self.burst
        self._stamp = self.monotonic()

    def take(self, deadline: float, sleep: Callable[[float], None] = time.sleep) -> None:
        """Spend one request, waiting for it if that ends before `deadline` (monotonic)."""
        while (wait := self._wait(deadline)) is not None:
            sleep(wait)

    async def atake(self, deadline: float) -> None:
        """`take` on an event loop: the wait is an `asyncio.sleep`."""
        while (wait := self._wait(deadline)) is not None:
            await asyncio.sleep(wait)

    def _wait(self, deadline: float) -> float | None:
        """Spend one request now (None), or how long until one may be spent."""
        with self._lock:
            now = self.monotonic()
            self._refill(now)
            ready = max(self._closed_until, now if self._tokens >= 1 else
                        now + (1 - self._tokens) * 60.0 / self.per_minute)
            if ready <= now:
                self._tokens -= 1
                return None
        if ready > deadline:
            raise BudgetSpent("the provider's request budget is spent until after the "
                              "probe's deadline", ready - now)
        return ready - now

    def close_for(self, seconds: float) -> None:
        """The provider asked for a pause: no request from any probe for `seconds`."""
        with self._lock:
            self._closed_until = max(self._closed_until, self.monotonic() + seconds)

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.per_minute / 60)
        self._stamp = now


class Budgets:
    """Budgets by name: probes configured with the same `budget` share one."""

    def __init__(self) -> None:
        self._budgets: dict[str, Budget] = {}
        self._lock = threading.Lock()

    def get(self, name: str, per_minute: float, burst: float) -> Budget:
        with self._lock:
            budget = self._budgets.get(name)
            if budget is None:
                budget = self._budgets[name] = Budget(per_minute, burst)
            return budget


#: The process's budgets; a budget's first probe sets its rate.
BUDGETS = Budgets()
