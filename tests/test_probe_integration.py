"""Every built-in probe recipe against the live sandbox over loopback, in every fault mode that
applies to it, judged through the sweeper, the ledger and the engine (SPEC sections 3 and 4).

Time: the sandbox runs on a ManualClock, and the ledger and the probes read the same clock, so a
10 s visibility window passes with `advance(11)` instead of a sleep. Only the faults themselves
(a lost answer's hold, a delay) and the client's patience take real, sub-second time.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from probes.config import parse_config
from probes.http_json import http_json
from probes.recipes import RECIPES, recipe_factory
from probes.registry import ProbeRegistry
from reconciler.core.domain import Authority, Decision, Facts, Observation, Verdict
from reconciler.core.schedule import SweepPolicy
from reconciler.core.verdicts import Finding
from reconciler.demo.agent import SHAPES, dispatch, plan_intent
from reconciler.ledger import Ledger
from reconciler.ledger.sweep import Sweeper
from reconciler.sandbox import RunningSandbox, running_sandbox
from reconciler.sandbox.credentials import SANDBOX_ENV
from reconciler.sandbox.faults import holds_answer
from reconciler.store.leases import SqlLeases
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore
from reconciler.testing import ManualClock

A, NA = Verdict.VERIFIED_APPLIED, Verdict.VERIFIED_NOT_APPLIED
FS, DUP, IND = Verdict.FALSE_SUCCESS, Verdict.DUPLICATE_EFFECT, Verdict.INDETERMINATE

VISIBILITY_LAG_S = 10.0
#: How long a request whose answer was not seen may still be applied (the settle time, SPEC
#: section 4): longer than any delay these tests inject.
IN_FLIGHT_S = 5.0
#: Past the settle time and every visibility window after it: a lagging zero observed now is
#: conclusive.
AFTER_WINDOW_S = IN_FLIGHT_S + VISIBILITY_LAG_S + 1
#: The client's patience where the fault is meant to outlast it, how long a lost answer is held
#: (longer), and a provider still working past it.
CLIENT_TIMEOUT_S, HOLD_S, DELAY = 0.25, 1.0, "delay=0.4"
#: Every other dispatch waits this long for its answer: on a loaded machine an answer can take
#: longer than CLIENT_TIMEOUT_S, and a timeout there is another scenario with another verdict
#: (an acknowledged send with no effect read as a timed-out one is no false success).
ANSWER_WAIT_S = 30.0
READ_BOUNDS = {"tries": 2, "backoff_s": 0.01, "timeout_s": 2.0, "deadline_s": 3.0}
#: The recipes whose writes the sandbox's shapes make (the PaymentIntent recipes and Slack
#: threads are driven by tests/test_provider_sdks.py and tests/test_probe_recipes.py).
PROVIDER_OF = {
    "stripe.charge": "payments", "stripe.charges.list": "payments",
    "stripe.charges.search": "payments", "postmark.outbound": "email",
    "postmark.details": "email", "slack.history": "chat", "github.issue": "issues",
    "github.issues.list": "issues", "github.search": "issues", "twilio.message": "sms",
    "twilio.messages.list": "sms"}
#: Reads by reference, and the correlation ref each needs (known only once the provider answers).
BY_ID = {"stripe.charge": "charge", "postmark.details": "message_id",
         "github.issue": "issue_number", "twilio.message": "message_sid"}
LAGGING_SEARCHES = ("stripe.charges.search", "postmark.outbound", "github.search")
#: What each recipe needs beyond the sandbox's URL: the sandbox takes no credential but
#: Twilio's Basic user, and its lags are the tests', not the providers' minutes.
SANDBOX_OPTIONS: dict[str, dict[str, Any]] = {
    "twilio": {"account_sid": "AC0DEMO"},
    "github": {"account": "sandbox-bot"}}  # the sandbox's issues' user
#: The credentials the recipes read (the sandbox checks them as each provider does).
ENV = {**SANDBOX_ENV, "TWILIO_ACCOUNT_SID": "AC0DEMO", "TWILIO_AUTH_TOKEN": "sandbox-token"}
#: Pins the account and mode a 404 must be read in before it is a zero (the sandbox's own).
PINNED = {"account": "acct_sandbox", "livemode": False}


def provider_of(recipe: str) -> str:
    return PROVIDER_OF[recipe]


# --- the world: sandbox, store, clock, sweeper ---------------------------------------------

@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox("127.0.0.1", 0) as running:
        yield running


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlStore]:
    """One SQLite store for the module's worlds, opened once: each test records operations
    of its own."""
    opened = open_store(f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'r.db'}")
    yield opened
    opened.engine.dispose()


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False) as client:
        yield client


class World:
    """One test's view: a fresh sandbox state on a manual clock, a ledger on the same clock."""

    def __init__(self, sandbox: RunningSandbox, store: SqlStore, http: httpx.Client) -> None:
        self.sandbox, self.store, self.http = sandbox, store, http
        self.clock = ManualClock()
        sandbox.state.reset()
        sandbox.state.clock = self.clock
        sandbox.state.configure(hold_s=HOLD_S)
        self.ledger = Ledger(store, self.now)
        # Probes date their observations by this clock too, so "after the window" is consistent.
        self.registry = ProbeRegistry()
        self.registry.register("http_json", partial(http_json, clock=self.now))
        for name in RECIPES:
            self.registry.register(name, partial(recipe_factory(name), clock=self.now))
        self.sweeper: Sweeper | None = None
        self.budget = uuid.uuid4().hex

    def now(self) -> datetime:
        return self.clock()

    def recipe(self, recipe: str, **options: Any) -> dict[str, Any]:
        """A probe table for `recipe` pointed at the sandbox."""
        root = SHAPES[provider_of(recipe)].root
        least = {"least_lag_s": VISIBILITY_LAG_S} if recipe in LAGGING_SEARCHES or (
            recipe == "github.issues.list") else {}
        # A request budget of this test's own: budgets are shared by name across the process.
        return {"use": recipe, "base_url": self.sandbox.url + root, **READ_BOUNDS, **least,
                "actions": [SHAPES[provider_of(recipe)].action],
                **SANDBOX_OPTIONS.get(recipe.split(".")[0], {}), "budget": self.budget, **options}

    def probe_with(self, provider: str, *probes: Mapping[str, Any]) -> None:
        """Configure `provider`'s contract and probes, as a probe configuration file would."""
        contract = {"visibility_lag_s": VISIBILITY_LAG_S, "inflight_s": IN_FLIGHT_S,
                    "idempotency_keys": SHAPES[provider].keyed}
        setup = parse_config({"providers": {provider: {**contract, "probes": list(probes)}}},
                             env=ENV, registry=self.registry)[provider]
        self.store.put_contract(setup.contract)
        self.sweeper = Sweeper(self.ledger, SqlLeases(self.store), lambda _: setup.probes,
                               SweepPolicy(probe_timeout_s=5.0))

    def send(self, provider: str, fault: str | None, *, correlate: str | None = None,
             settle: bool = False) -> str:
        """Record an intent, dispatch it once with `fault`, record the attempt; the op id.

        `correlate` names a correlation ref to fill with the effect's reference (from the answer,
        else from the provider's store, as a webhook would tell). Only then is the intent
        recorded after the dispatch: with the same times, the facts are those of an intent
        recorded first. `settle` waits for a delayed write to finish on the provider (a lost
        answer's always is).
        """
        shape = SHAPES[provider]
        intent = plan_intent(shape, f"op-{uuid.uuid4().hex[:12]}", self.now(), "run-it")
        if correlate is None:
            self.ledger.record_intent(intent)
        attempt = dispatch(self.http, self.sandbox.url, shape, intent, 1, self.now(),
                           fault=fault,
                           timeout_s=CLIENT_TIMEOUT_S if holds_answer(fault) else ANSWER_WAIT_S)
        # A lost answer means a committed effect: on a loaded machine the client may give up
        # before the server got that far, and the effect would still be in flight, not lost.
        if settle or fault == "lose_response":
            self.wait_for_effect(intent.request_hash)
        if correlate is not None:
            ref = attempt.receipt.provider_ref if attempt.receipt else self.stored_ref(
                intent.request_hash)
            intent = replace(intent, correlation={**intent.correlation, correlate: ref})
            self.ledger.record_intent(intent)
        self.ledger.record_attempt(attempt)
        return intent.operation_id

    def stored_ref(self, request_hash: str) -> str:
        """The reference the provider gives the stored object (an issue's number, not the
        sandbox's "owner/repo#number")."""
        ref = next(r.ref for r in self.sandbox.state.objects() if r.request_hash == request_hash)
        return ref.rsplit("#", 1)[-1]

    def wait_for_effect(self, request_hash: str, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(r.request_hash == request_hash for r in self.sandbox.state.objects()):
            assert time.monotonic() < deadline, "the delayed write never committed"
            time.sleep(0.02)
        # The key record is finished in the same step as the commit, before the answer.

    def reconcile(self, operation_id: str, after_s: float = 0.0) -> Decision:
        self.clock.advance(after_s)
        assert self.sweeper is not None
        judgement = self.sweeper.reconcile(operation_id)
        assert judgement is not None
        return judgement.decision

    def facts(self, operation_id: str) -> Facts:
        return self.store.facts(operation_id)


@pytest.fixture
def world(sandbox: RunningSandbox, module_store: SqlStore, http: httpx.Client) -> World:
    return World(sandbox, module_store, http)


def observations(world: World, operation_id: str) -> list[Observation]:
    return world.facts(operation_id).of(Observation)


# --- every recipe in every fault mode that applies -----------------------------------------

@dataclass(frozen=True, slots=True)
class Case:
    recipe: str
    fault: str | None
    verdict: Verdict
    options: Mapping[str, Any]
    findings: tuple[str, ...] = ()

    @property
    def settle(self) -> bool:
        return self.fault is not None and self.fault.startswith("delay")


def case(recipe: str, fault: str | None, verdict: Verdict, *findings: str,
         **options: Any) -> Any:
    label = "-".join([recipe, fault or "no_fault", *(f"{k}={v}" for k, v in options.items())])
    return pytest.param(Case(recipe, fault, verdict, options, findings), id=label)


def every_fault(recipe: str, **options: Any) -> list[Any]:
    """A write-side recipe that finds effects by the operation: all six faults apply."""
    return [case(recipe, "lose_response", A, **options),
            case(recipe, "error_after_commit", A, **options),
            case(recipe, DELAY, A, **options),
            case(recipe, "duplicate", DUP, Finding.DUPLICATE_EFFECT, **options),
            case(recipe, "ack_no_effect", FS, Finding.SUCCESS_CLAIM, **options),
            case(recipe, "fail_before_commit", NA, **options)]


CASES = [
    # Stripe's list by `created` window: the consistent read, every page followed.
    *every_fault("stripe.charges.list"),
    *every_fault("stripe.charges.search"),
    *every_fault("postmark.outbound"),
    *every_fault("slack.history"),
    *every_fault("github.search"),
    *every_fault("github.issues.list"),
    # Reads by reference need the id; a lost answer's id comes from the store (a webhook).
    case("stripe.charge", None, A),
    case("stripe.charge", "lose_response", A),
    case("stripe.charge", "duplicate", A),
    # A 404 is a zero only once the key is shown to read the pinned account and mode.
    case("stripe.charge", "ack_no_effect", FS, **PINNED),
    case("postmark.details", None, A),
    case("postmark.details", "lose_response", A),
    case("postmark.details", "duplicate", A),
    case("github.issue", None, A),
    case("github.issue", "lose_response", A),
    case("github.issue", "duplicate", A),
    case("twilio.message", None, A),
    case("twilio.message", "lose_response", A),
    case("twilio.message", "duplicate", A),
    # A message carries no metadata: the list by `To` is a hint that proves nothing.
    case("twilio.messages.list", "lose_response", IND, Finding.WEAK_MATCH),
    case("twilio.messages.list", "fail_before_commit", IND),
]


@pytest.mark.parametrize("c", CASES)
def test_recipe_against_the_sandbox_gives_the_spec_verdict(world: World, c: Case) -> None:
    provider = provider_of(c.recipe)
    world.probe_with(provider, world.recipe(c.recipe, **c.options))
    op = world.send(provider, c.fault, correlate=BY_ID.get(c.recipe), settle=c.settle)

    decision = world.reconcile(op, after_s=AFTER_WINDOW_S)

    assert decision.verdict is c.verdict, decision.findings
    assert set(c.findings) <= set(decision.findings)
    assert Finding.PROBE_UNAVAILABLE not in decision.findings
    # Only a same-key retry after a proven zero may be granted.
    assert decision.retry_allowed == (c.verdict is NA and SHAPES[provider].keyed)


@pytest.mark.parametrize(("recipe", "fault"), [
    ("stripe.charge", "ack_no_effect"), ("postmark.details", "ack_no_effect")])
def test_a_not_found_by_id_that_may_not_be_absence_is_no_zero(world: World, recipe: str,
                                                              fault: str) -> None:
    # Stripe's 404 without a pinned account and mode; Postmark's 422/701 (seen for a queued
    # message sent later): neither is a zero, so a false success is never claimed from it.
    world.probe_with(provider_of(recipe), world.recipe(recipe))
    op = world.send(provider_of(recipe), fault, correlate=BY_ID[recipe])

    decision = world.reconcile(op, after_s=AFTER_WINDOW_S)

    assert decision.verdict is IND and not decision.retry_allowed
    assert observations(world, op)[-1].authority is Authority.UNAVAILABLE


# --- lagging reads ---------------------------------------------------------------------------

@pytest.mark.parametrize("recipe", LAGGING_SEARCHES)
@pytest.mark.parametrize(("fault", "final"), [("lose_response", A), ("fail_before_commit", NA)])
def test_lagging_search_is_indeterminate_inside_the_window_and_decides_after_it(
        world: World, recipe: str, fault: str, final: Verdict) -> None:
    world.sandbox.state.configure(search_lag_s=5)
    provider = provider_of(recipe)
    world.probe_with(provider, world.recipe(recipe))
    op = world.send(provider, fault)

    inside = world.reconcile(op, after_s=1)
    assert inside.verdict is IND
    assert Finding.ZERO_NOT_CONCLUSIVE in inside.findings and not inside.retry_allowed
    assert observations(world, op)[-1].authority is Authority.LAGGING

    assert world.reconcile(op, after_s=AFTER_WINDOW_S - 1).verdict is final


def test_a_charge_in_flight_is_not_yet_listed_so_its_zero_waits_for_the_settle_time(
        world: World) -> None:
    # The field trial's first double charge: the client gave up, Stripe's list did not show the
    # charge still being applied, and that zero opened a retry. A zero read before the settle
    # time proves nothing; the read after it finds the charge the provider committed late.
    world.probe_with("payments", world.recipe("stripe.charges.list"))
    op = world.send("payments", "delay=0.8")

    in_flight = world.reconcile(op, after_s=1)
    assert not in_flight.retry_allowed
    if not observations(world, op)[-1].matches:  # read before the sandbox committed
        assert in_flight.verdict is IND and Finding.ZERO_NOT_CONCLUSIVE in in_flight.findings

    world.wait_for_effect(world.facts(op).intent.request_hash)
    settled = world.reconcile(op, after_s=IN_FLIGHT_S)
    assert settled.verdict is A and not settled.retry_allowed
    assert len(world.sandbox.state.objects()) == 1


# --- reads that cannot answer prove nothing -------------------------------------------------

ALL_RECIPES = sorted(PROVIDER_OF)


@pytest.mark.parametrize("recipe", ALL_RECIPES)
def test_unavailable_read_api_is_unavailable_evidence_and_no_verdict(
        world: World, recipe: str) -> None:
    provider = provider_of(recipe)
    world.probe_with(provider, world.recipe(recipe))
    op = world.send(provider, "lose_response", correlate=BY_ID.get(recipe))
    world.sandbox.state.configure(read_unavailable=True)

    decision = world.reconcile(op, after_s=AFTER_WINDOW_S)

    assert decision.verdict is IND and not decision.retry_allowed
    assert Finding.PROBE_UNAVAILABLE in decision.findings
    seen = observations(world, op)
    assert [o.authority for o in seen] == [Authority.UNAVAILABLE]
    assert seen[0].error == "HTTP 503 after 2 tries"


@pytest.mark.parametrize("recipe", ALL_RECIPES)
def test_a_rate_limited_read_is_unavailable_never_a_zero(world: World, recipe: str) -> None:
    # Each fake answers its provider's own rate limit (GitHub's 403 with x-ratelimit-remaining
    # 0, Slack's and Twilio's 429 with Retry-After, Stripe's and Postmark's 429); the pause asked
    # for is past the probe's deadline, so it ends the read.
    provider = provider_of(recipe)
    world.probe_with(provider, world.recipe(recipe))
    op = world.send(provider, "lose_response", correlate=BY_ID.get(recipe))
    world.sandbox.state.configure(rate_limited_s=60)

    decision = world.reconcile(op, after_s=AFTER_WINDOW_S)

    assert decision.verdict is IND and not decision.retry_allowed
    [seen] = observations(world, op)
    assert seen.authority is Authority.UNAVAILABLE
    assert seen.error is not None and ("rate limited" in seen.error or "429" in seen.error)


#: A provider gone wrong: answers that are not JSON, not the expected shape, or a 500.
GARBAGE: dict[str, tuple[int, str, bytes]] = {
    "/not-json": (200, "text/html", b"<html>down for maintenance</html>"),
    "/wrong-shape": (200, "application/json", b'{"data": "not a list"}'),
    "/boom": (500, "application/json", b'{"error": "internal"}')}


class _Garbage(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, kind, body = GARBAGE[self.path.split("?")[0]]
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output is not the place for an access log."""


@pytest.fixture(scope="module")
def garbage_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize(("path", "error"), [
    ("/not-json", "the response is not JSON"),
    ("/wrong-shape", "'data' is not a list of objects"),
    ("/boom", "HTTP 500 (internal)"),
])
def test_garbage_answers_are_unavailable_never_a_zero(
        world: World, garbage_url: str, path: str, error: str) -> None:
    # Nothing was charged, so a misread "zero" would grant a retry: it must not be one.
    world.probe_with("payments", {"use": "http_json", "base_url": garbage_url, "path": path,
                                  "items": "data", "ref": "id", "authority": "authoritative",
                                  **READ_BOUNDS})
    op = world.send("payments", "fail_before_commit")

    decision = world.reconcile(op, after_s=AFTER_WINDOW_S)

    assert decision.verdict is IND and not decision.retry_allowed
    assert [(o.authority, o.error) for o in observations(world, op)] == [
        (Authority.UNAVAILABLE, error)]


def test_a_wrong_base_url_404_is_not_the_providers_not_found(world: World) -> None:
    # The mail provider's root has no charges: its 404 is Postmark's, not "no such charge".
    wrong = world.recipe("stripe.charge", base_url=world.sandbox.url + "/mail", **PINNED)
    world.probe_with("payments", wrong)
    op = world.send("payments", None, correlate="charge")

    decision = world.reconcile(op, after_s=1)

    assert decision.verdict is IND and not decision.retry_allowed
    assert observations(world, op)[-1].error == "HTTP 404 (0)"


# --- a cached list configured as weak never verifies ----------------------------------------

@pytest.mark.parametrize("recipe", ["slack.history", "github.issues.list"])
@pytest.mark.parametrize(("fault", "snapshot_first"), [
    ("lose_response", True),        # the cache predates the effect: a zero where there is one
    ("fail_before_commit", True),   # a zero where there is none: still not proof
    ("lose_response", False),       # the cache shows the effect: a hint, not proof
])
def test_cached_list_configured_weak_never_verifies(
        world: World, recipe: str, fault: str, snapshot_first: bool) -> None:
    world.sandbox.state.configure(cached_list=True)
    provider = provider_of(recipe)
    world.probe_with(provider, world.recipe(recipe, authority="weak"))
    if snapshot_first:
        # Another operation's probe reads the list first: the cache is taken before this write.
        world.reconcile(world.send(provider, None))
    op = world.send(provider, fault)
    for after_s in (1, 60, 3_600):
        decision = world.reconcile(op, after_s=after_s)
        assert decision.verdict is IND and not decision.retry_allowed
    assert {o.authority for o in observations(world, op)} == {Authority.WEAK}
    assert (Finding.WEAK_MATCH in decision.findings) is not snapshot_first
