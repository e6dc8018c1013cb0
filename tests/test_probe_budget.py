"""A provider's request budget, shared by its probes (probes/budget.py), and the pause a
rate-limit answer asks for: on a fake clock, and through the probes that share one."""

from __future__ import annotations

import httpx
import pytest

from probes.budget import Budget, BudgetSpent
from probes.http_json import HttpJsonProbe
from probes.recipes import recipe_factory
from reconciler.core.domain import Authority
from reconciler.testing import ManualMonotonic

from probe_harness import observe


def test_a_budget_lets_a_burst_through_then_paces_requests_to_its_rate() -> None:
    clock = ManualMonotonic()
    budget = Budget(per_minute=60, burst=2, monotonic=clock)
    for _ in range(3):
        budget.take(deadline=clock() + 10, sleep=clock.sleep)
    assert clock.slept == [pytest.approx(1.0)]  # the third waited for one token at 1/s


def test_a_request_the_budget_cannot_fit_before_the_deadline_is_refused_without_waiting() -> None:
    clock = ManualMonotonic()
    budget = Budget(per_minute=1, burst=1, monotonic=clock)
    budget.take(deadline=clock() + 5, sleep=clock.sleep)
    with pytest.raises(BudgetSpent):
        budget.take(deadline=clock() + 5, sleep=clock.sleep)
    assert clock.slept == []


def test_a_pause_the_provider_asked_for_holds_every_probe_sharing_the_budget() -> None:
    clock = ManualMonotonic()
    budget = Budget(per_minute=600, burst=10, monotonic=clock)
    budget.close_for(30)
    with pytest.raises(BudgetSpent):
        budget.take(deadline=clock() + 29, sleep=clock.sleep)
    budget.take(deadline=clock() + 31, sleep=clock.sleep)
    assert clock.slept == [pytest.approx(30.0)]


def test_a_429_with_retry_after_closes_the_budget_for_the_other_probes_of_the_provider() -> None:
    sent: list[str] = []

    def provider(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(429, json={"ok": False, "error": "ratelimited"},
                              headers={"Retry-After": "30"})

    def slack(name: str) -> HttpJsonProbe:
        return recipe_factory("slack.history")(
            name, {"base_url": "http://slack.test", "auth": "none", "budget": "shared-429",
                   "deadline_s": 1, "backoff_s": 0}, {},
            transport=httpx.MockTransport(provider))

    first, second = slack("a"), slack("b")
    limited, held = observe(first), observe(second)

    assert limited.authority is held.authority is Authority.UNAVAILABLE
    assert "rate limited" in (limited.error or "") and "budget" in (held.error or "")
    assert sent == ["/api/conversations.history"]  # the second probe asked nobody


def test_a_backlog_cannot_spend_more_than_the_budget() -> None:
    sent: list[int] = []

    def provider(request: httpx.Request) -> httpx.Response:
        sent.append(1)
        return httpx.Response(200, json={"ok": True, "messages": [], "has_more": False})

    probe = recipe_factory("slack.history")(
        "backlog", {"base_url": "http://slack.test", "auth": "none", "budget": "backlog",
                    "budget_per_minute": 1, "deadline_s": 0.5}, {},
        transport=httpx.MockTransport(provider))

    answers = [observe(probe) for _ in range(5)]

    assert sent == [1]  # one request a minute, whatever the backlog
    assert [a.authority for a in answers] == [Authority.AUTHORITATIVE] + [Authority.UNAVAILABLE] * 4
