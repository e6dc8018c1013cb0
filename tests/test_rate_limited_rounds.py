"""A provider's rate limit is respected by the probe schedule, not spent: a round whose every read
the rate limit cut (a 429 with `Retry-After`, Slack's one request a minute) made no read, so it
does not count against the probe budget, and the next round waits out the pause the provider
asked for instead of backing off into it. The deadline still escalates."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from test_probe_recipes import json, pages, slack_page
from test_sweep import dispatched, ledger, reading, sweeper  # noqa: F401  (ledger: fixture)

from probes.base import ProbeTarget
from reconciler.core.domain import Authority, Observation, Verdict
from reconciler.ledger import Ledger
from reconciler.testing import FakeProbe, ManualClock

from probe_harness import observe, probe

PAUSE_S = 60


def rate_limited(clock: ManualClock) -> Callable[[ProbeTarget], Observation]:
    """A read the provider's rate limit cut, as http_json reports it."""
    return lambda target: Observation(
        target.operation_id, clock(), "limited", Authority.UNAVAILABLE,
        error="rate limited: HTTP 429, asked to wait 60s: past the deadline (after 1 tries)",
        retry_at=clock() + timedelta(seconds=PAUSE_S))


def down(clock: ManualClock) -> Callable[[ProbeTarget], Observation]:
    return lambda target: Observation(target.operation_id, clock(), "down",
                                      Authority.UNAVAILABLE, error="HTTP 500")


def swept(book: Ledger, clock: ManualClock, *probes: FakeProbe, times: int,
          budget: int) -> list[str]:
    """Sweep `times` times, a pause apart; the operations escalated."""
    dispatched(book)
    runner = sweeper(book, *probes, probe_budget=budget, first_backoff_s=1)
    for _ in range(times):
        runner.sweep()
        clock.advance(PAUSE_S)
    return [o.operation_id for o in book.store.list_operations(escalated=True)]


def test_the_next_round_waits_the_pause_the_provider_asked_for(
        ledger: Ledger, clock: ManualClock) -> None:  # noqa: F811
    limited = reading(rate_limited(clock), "limited")
    dispatched(ledger)
    runner = sweeper(ledger, limited, first_backoff_s=1)
    runner.sweep()
    clock.advance(PAUSE_S - 1)
    assert runner.sweep() == [] and len(limited.calls) == 1  # a 1 s backoff would have read again
    clock.advance(1)
    assert len(runner.sweep()) == 1 and len(limited.calls) == 2


def test_a_round_the_rate_limit_cut_is_not_spent_against_the_probe_budget(
        ledger: Ledger, clock: ManualClock) -> None:  # noqa: F811
    limited = reading(rate_limited(clock), "limited")
    assert swept(ledger, clock, limited, times=6, budget=3) == []
    assert len(limited.calls) == 6


def test_a_read_that_failed_otherwise_is_spent(ledger: Ledger, clock: ManualClock) -> None:  # noqa: F811
    failing = reading(down(clock), "down")
    assert swept(ledger, clock, failing, times=6, budget=3) == ["op-1"]
    assert len(failing.calls) == 3


def test_a_round_with_one_read_made_is_spent(ledger: Ledger, clock: ManualClock) -> None:  # noqa: F811
    limited = reading(rate_limited(clock), "limited")
    assert swept(ledger, clock, limited, reading(down(clock), "down"), times=4,
                 budget=2) == ["op-1"]
    assert len(limited.calls) == 2


def test_a_provider_that_stays_rate_limited_escalates_at_the_deadline(
        ledger: Ledger, clock: ManualClock) -> None:  # noqa: F811
    limited = reading(rate_limited(clock), "limited")
    dispatched(ledger)
    runner = sweeper(ledger, limited)
    judgements = []
    for _ in range(12):  # the deadline is 600 s: ten pauses
        judgements += runner.sweep()
        clock.advance(PAUSE_S)
    assert judgements[-1].decision.next_action == "escalate_to_human"
    assert judgements[-1].decision.verdict is Verdict.INDETERMINATE
    assert len(limited.calls) == 11


@pytest.mark.parametrize("retry_after", ["60", "3600"])
def test_a_slack_429_past_the_deadline_tells_the_schedule_how_long_to_wait(
        retry_after: str) -> None:
    handler, seen = pages(json({"ok": False, "error": "ratelimited"}, 429,
                               **{"Retry-After": retry_after}))
    obs = observe(probe("slack.history", handler, deadline_s=1))
    assert obs.authority is Authority.UNAVAILABLE and len(seen) == 1
    assert obs.retry_at is not None
    assert abs((obs.retry_at - obs.at).total_seconds() - int(retry_after)) < 5


def test_a_read_the_request_budget_cannot_fit_is_no_miss_either() -> None:
    """Slack's one request a minute for apps outside the Marketplace (`budget_per_minute = 1`):
    the second read in the minute is not sent, and says when the budget opens."""
    handler, seen = pages(slack_page("op-1"), slack_page("op-1"))
    paced = probe("slack.history", handler, deadline_s=1, budget_per_minute=1)
    assert observe(paced).matches
    second = observe(paced)
    assert second.authority is Authority.UNAVAILABLE and len(seen) == 1
    assert second.retry_at is not None
    assert 50 < (second.retry_at - second.at).total_seconds() <= 61
