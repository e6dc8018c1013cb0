"""The declarative HTTP probe's transport and credentials, against httpx.MockTransport (no
network): retries, unexpected answers, timeouts and deadlines, and secrets it never shows.

Two tests (the hanging reads) use a socket on the loopback interface, because a real timeout is
what they check and a mock transport cannot hang.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from probes.recipes import recipe_factory
from reconciler.core.domain import Authority, Match
from reconciler.testing import ManualClock

from probe_harness import BASE, OP, SECRET, Handler, charge, observe, probe

STRIPE_ENV = {"STRIPE_SECRET_KEY": "sk_test_x"}

# --- transport trouble -------------------------------------------------------------------------


def scripted(*steps: httpx.Response | Exception) -> tuple[Handler, list[int]]:
    """A handler that plays `steps` in order, and the list of calls it counts."""
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        step = steps[min(len(calls), len(steps)) - 1]
        if isinstance(step, Exception):
            raise step
        return step

    return handler, calls


def test_transient_errors_are_retried_until_an_answer() -> None:
    handler, calls = scripted(
        httpx.Response(503), httpx.ConnectError("refused"), httpx.Response(429),
        httpx.Response(200, json={"data": [charge("ch_1")]}))
    obs = observe(probe("stripe.payment_intents.search", handler, tries=4))
    assert obs.matches == (Match("ch_1", "sha256:ch_1"),) and len(calls) == 4


@pytest.mark.parametrize(("step", "error"), [
    (httpx.Response(502), "HTTP 502 after 3 tries"),
    (httpx.ReadTimeout("slow"), "ReadTimeout after 3 tries"),
])
def test_retries_are_bounded_then_unavailable(step: Any, error: str) -> None:
    handler, calls = scripted(step)
    obs = observe(probe("stripe.payment_intents.search", handler))
    assert (obs.authority, obs.error, obs.matches, len(calls)) == (
        Authority.UNAVAILABLE, error, (), 3)


@pytest.mark.parametrize(("response", "error"), [
    (httpx.Response(500, json={"error": "boom"}), "HTTP 500 (boom)"),
    (httpx.Response(200, text="<html>oops</html>"), "the response is not JSON"),
    (httpx.Response(200, json={"data": {"not": "a list"}}), "'data' is not a list of objects"),
    (httpx.Response(200, json={"object": "search_result"}), "no 'data' in the response"),
    (httpx.Response(200, json={"data": [{"metadata": {"operation_id": OP},
                                         "status": "succeeded"}]}),
     "a matching item has no 'id'"),
    (httpx.Response(302, headers={"Location": "http://elsewhere.test/"}), "HTTP 302"),
    (httpx.Response(200, content=b"[" * 2_000_000), "response larger than 1048576 bytes"),
])
def test_unexpected_answers_are_unavailable_without_retry(response: httpx.Response,
                                                          error: str) -> None:
    handler, calls = scripted(response)
    obs = observe(probe("stripe.payment_intents.search", handler))
    assert (obs.authority, obs.error, len(calls)) == (Authority.UNAVAILABLE, error, 1)


def test_a_hanging_read_is_cut_by_the_timeout(silent_server: str) -> None:
    p = recipe_factory("stripe.payment_intents.search")(
        "s", {"base_url": silent_server, "timeout_s": 0.2, "backoff_s": 0, "tries": 2}, STRIPE_ENV)
    started = time.monotonic()
    obs = observe(p)
    assert (obs.authority, obs.error) == (Authority.UNAVAILABLE, "ReadTimeout after 2 tries")
    assert time.monotonic() - started < 2


def test_the_deadline_bounds_all_tries_together(silent_server: str) -> None:
    p = recipe_factory("stripe.payment_intents.search")(
        "s", {"base_url": silent_server, "timeout_s": 5, "deadline_s": 0.3, "tries": 10},
        STRIPE_ENV)
    started = time.monotonic()
    assert observe(p).authority is Authority.UNAVAILABLE
    assert time.monotonic() - started < 1.5


def test_an_observation_is_dated_when_its_answering_read_was_sent() -> None:
    # Safe for a lagging zero: the provider's state is at least as recent as the send time.
    # A second passes before each reading: the failed read is sent at 00:00:00, the answer's at
    # 00:00:01.
    clock = ManualClock(datetime(2025, 12, 31, 23, 59, 59, tzinfo=UTC), step=timedelta(seconds=1))
    handler, _ = scripted(httpx.Response(503), httpx.Response(200, json={"data": []}))
    p = recipe_factory("stripe.payment_intents.search")(
        "s", {"base_url": BASE, "backoff_s": 0}, STRIPE_ENV, transport=httpx.MockTransport(handler),
        clock=clock)
    assert observe(p).at == datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)


# --- credentials and secrets ---------------------------------------------------------------


def test_missing_credentials_make_the_probe_unavailable_without_a_request() -> None:
    handler, calls = scripted(httpx.Response(200, json={"data": []}))
    obs = observe(probe("stripe.payment_intents.search", handler, token_env="UNSET_KEY"))
    assert (obs.authority, obs.error, calls) == (
        Authority.UNAVAILABLE, "credentials not set: UNSET_KEY", [])


def test_secrets_are_sent_but_never_shown() -> None:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers["Authorization"])
        return httpx.Response(401, json={"error": f"bad key {SECRET}"})

    p = probe("stripe.payment_intents.search", handler, token_env="PAY_KEY")
    obs = observe(p)
    assert sent == [f"Bearer {SECRET}"]
    assert obs.error == "HTTP 401"
    for shown in (repr(p), repr(obs), repr(p.spec)):
        assert SECRET not in shown
    assert "PAY_KEY" in repr(p)
