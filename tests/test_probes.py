"""The declarative HTTP probe and its recipes, against httpx.MockTransport (no network).

One test (the hanging read) uses a socket on the loopback interface, because a real timeout is
what it checks and a mock transport cannot hang.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from probes.base import Probe, ProbeTarget
from probes.config import load_config, parse_config
from probes.errors import ProbeConfigError, UnknownProbeError
from probes.http_json import HttpJsonProbe, http_json
from probes.recipes import recipe_factory
from probes.registry import ProbeRegistry
from reconciler.domain import Authority, Match, Observation, Receipt

BASE = "http://provider.test/pay"
OP = "op-1"
SECRET = "sk_live_do_not_leak"
Handler = Callable[[httpx.Request], httpx.Response]


def target(**changes: Any) -> ProbeTarget:
    fields: dict[str, Any] = {
        "operation_id": OP, "idempotency_key": "key-1", "provider": "payments",
        "action": "charge", "request_hash": "sha256:h0",
        "correlation": {"charge_id": "ch_1", "message_id": "m-1", "channel": "C1",
                        "owner": "octo", "repo": "hello"}}
    return ProbeTarget(**{**fields, **changes})


def probe(recipe: str, handler: Handler, **options: Any) -> HttpJsonProbe:
    """A recipe's probe over a mock transport that refuses anything but GET."""

    def read_only(request: httpx.Request) -> httpx.Response:
        assert request.method == "GET"
        return handler(request)

    return recipe_factory(recipe)(
        recipe, {"base_url": BASE, "backoff_s": 0, **options}, {"PAY_KEY": SECRET},
        transport=httpx.MockTransport(read_only))


def answer(body: Any, status: int = 200) -> Handler:
    return lambda request: httpx.Response(status, json=body)


def observe(p: Probe, t: ProbeTarget | None = None) -> Observation:
    result = p.probe(t or target())
    assert isinstance(result, Observation)
    return result


def charge(ref: str, op: str = OP) -> dict[str, Any]:
    return {"id": ref, "object": "charge", "metadata": {"operation_id": op},
            "request_hash": f"sha256:{ref}"}


# --- each recipe's reading of its provider --------------------------------------------------


def test_stripe_search_keeps_only_this_operations_charges() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"object": "search_result", "data": [
            charge("ch_1"), charge("ch_2", op="op-10"), charge("ch_3"), charge("ch_1")]})

    obs = observe(probe("stripe_like.search", handler))
    assert obs.authority is Authority.LAGGING and obs.error is None
    assert obs.matches == (Match("ch_1", "sha256:ch_1"), Match("ch_3", "sha256:ch_3"))
    assert seen[0].url.path == "/pay/v1/charges/search"
    assert seen[0].url.params["query"] == "metadata['operation_id']:'op-1'"


def test_stripe_charge_by_reference() -> None:
    assert observe(probe("stripe_like.charge", answer(charge("ch_1")))).matches == (
        Match("ch_1", "sha256:ch_1"),)
    missing = {"error": {"type": "invalid_request_error", "code": "resource_missing"}}
    zero = observe(probe("stripe_like.charge", answer(missing, 404)))
    assert (zero.authority, zero.matches, zero.error) == (Authority.AUTHORITATIVE, (), None)
    # Someone else's charge under our reference proves nothing either way.
    other = observe(probe("stripe_like.charge", answer(charge("ch_1", op="op-2"))))
    assert other.authority is Authority.UNAVAILABLE
    unknown = observe(probe("stripe_like.charge", answer({})), target(correlation={}))
    assert unknown.error == "correlation ref missing: charge_id"


def test_stripe_idempotency_record_is_a_receipt_and_its_absence_an_authoritative_zero() -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path)
        return httpx.Response(200, json={"key": "key/1", "charge_id": "ch_9",
                                         "request_hash": "sha256:h0", "created": 1})

    receipt = probe("stripe_like.idempotency_record", handler).probe(
        target(idempotency_key="key/1"))
    assert isinstance(receipt, Receipt)
    assert (receipt.provider_ref, receipt.request_hash, receipt.source) == (
        "ch_9", "sha256:h0", "lookup")
    assert seen == [b"/pay/v1/idempotency_keys/key%2F1"]  # a key cannot change the path

    missing = {"error": {"type": "invalid_request_error", "code": "resource_missing"}}
    zero = observe(probe("stripe_like.idempotency_record", answer(missing, 404)))
    assert (zero.authority, zero.matches) == (Authority.AUTHORITATIVE, ())
    no_key = observe(probe("stripe_like.idempotency_record", answer({})),
                     target(idempotency_key=None))
    assert no_key.error == "operation has no idempotency key"


@pytest.mark.parametrize("body", [{"detail": "Not Found"}, "<html>not found</html>"])
def test_a_404_that_is_not_the_providers_no_such_object_is_no_zero(body: Any) -> None:
    # A wrong base_url answers 404 too; reading that as "no effect" could open a retry.
    handler: Handler = (answer(body, 404) if isinstance(body, dict)
                        else lambda request: httpx.Response(404, text=body))
    obs = observe(probe("stripe_like.idempotency_record", handler))
    assert (obs.authority, obs.error) == (Authority.UNAVAILABLE, "HTTP 404")


def test_postmark_search_and_by_id() -> None:
    headers: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        headers.append(request.headers.get("X-Postmark-Server-Token"))
        return httpx.Response(200, json={"TotalCount": 2, "Messages": [
            {"MessageID": "m-1", "Metadata": {"operation_id": OP}, "RequestHash": "sha256:a"},
            {"MessageID": "m-2", "Metadata": {"operation_id": "op-2"}, "RequestHash": "x"}]})

    search = observe(probe("postmark_like.search", handler, token_env="PAY_KEY"))
    assert (search.authority, search.matches) == (Authority.LAGGING, (Match("m-1", "sha256:a"),))
    assert headers == [SECRET]

    message = {"MessageID": "m-1", "Metadata": {"operation_id": OP}, "RequestHash": "sha256:a"}
    by_id = observe(probe("postmark_like.by_id", answer(message)))
    assert (by_id.authority, by_id.matches) == (Authority.AUTHORITATIVE, search.matches)
    zero = observe(probe("postmark_like.by_id", answer({"ErrorCode": 701}, 404)))
    assert (zero.authority, zero.matches) == (Authority.AUTHORITATIVE, ())


def slack_history(*ops: str, ok: bool = True) -> Handler:
    messages = [{"ts": f"{i}.000", "text": "hi", "request_hash": None,
                 "metadata": {"event_type": "x", "event_payload": {"operation_id": op}}}
                for i, op in enumerate(ops)]
    return answer({"ok": ok, "messages": messages, "has_more": False})


def test_slack_history_is_authoritative_unless_configured_weak() -> None:
    obs = observe(probe("slack_like.history", slack_history("op-2", OP)))
    assert (obs.authority, obs.matches) == (Authority.AUTHORITATIVE, (Match("1.000"),))
    weak = observe(probe("slack_like.history", slack_history("op-2"), authority="weak"))
    assert (weak.authority, weak.matches) == (Authority.WEAK, ())
    refused = observe(probe("slack_like.history", slack_history(OP, ok=False)))
    assert refused.error == "the response failed the check on 'ok'"


def test_slack_full_page_without_a_match_proves_nothing() -> None:
    full = observe(probe("slack_like.history", slack_history(*["op-2"] * 200)))
    assert (full.authority, full.matches) == (Authority.WEAK, ())
    found = observe(probe("slack_like.history", slack_history(*["op-2"] * 199, OP)))
    assert found.authority is Authority.AUTHORITATIVE and len(found.matches) == 1


def issue(number: int, op: str) -> dict[str, Any]:
    return {"id": 1000 + number, "number": number, "title": "t", "request_hash": None,
            "body": f"text\n<!-- reconciler:op={op} -->"}


def test_github_search_matches_the_exact_marker_only() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"total_count": 2,
                                         "items": [issue(7, OP), issue(8, "op-10")]})

    obs = observe(probe("github_like.search", handler))
    assert (obs.authority, obs.matches) == (Authority.LAGGING, (Match("7"),))
    assert seen[0].url.params["q"] == "reconciler:op=op-1 repo:octo/hello"


def test_github_issue_list_is_weak_by_default_and_capped_at_lagging() -> None:
    handler = answer([issue(3, "op-2"), issue(2, OP)])
    obs = observe(probe("github_like.issue_list", handler))
    assert (obs.authority, obs.matches) == (Authority.WEAK, (Match("2"),))
    assert observe(probe("github_like.issue_list", handler, authority="lagging")).authority \
        is Authority.LAGGING
    with pytest.raises(ProbeConfigError, match="proves at most 'lagging'"):
        probe("github_like.issue_list", handler, authority="authoritative")


def test_a_recipe_fixes_its_shape() -> None:
    with pytest.raises(ProbeConfigError, match="path fixed by the recipe"):
        probe("stripe_like.search", answer({}), path="/elsewhere")


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
    obs = observe(probe("stripe_like.search", handler, tries=4))
    assert obs.matches == (Match("ch_1", "sha256:ch_1"),) and len(calls) == 4


@pytest.mark.parametrize(("step", "error"), [
    (httpx.Response(502), "HTTP 502 after 3 tries"),
    (httpx.ReadTimeout("slow"), "ReadTimeout after 3 tries"),
])
def test_retries_are_bounded_then_unavailable(step: Any, error: str) -> None:
    handler, calls = scripted(step)
    obs = observe(probe("stripe_like.search", handler))
    assert (obs.authority, obs.error, obs.matches, len(calls)) == (
        Authority.UNAVAILABLE, error, (), 3)


@pytest.mark.parametrize(("response", "error"), [
    (httpx.Response(500, json={"error": "boom"}), "HTTP 500"),
    (httpx.Response(200, text="<html>oops</html>"), "the response is not JSON"),
    (httpx.Response(200, json={"data": {"not": "a list"}}), "'data' is not a list of objects"),
    (httpx.Response(200, json={"object": "search_result"}), "no 'data' in the response"),
    (httpx.Response(200, json={"data": [{"metadata": {"operation_id": OP}}]}),
     "a matching item has no 'id'"),
    (httpx.Response(302, headers={"Location": "http://elsewhere.test/"}), "HTTP 302"),
    (httpx.Response(200, content=b"[" * 2_000_000), "response larger than 1048576 bytes"),
])
def test_unexpected_answers_are_unavailable_without_retry(response: httpx.Response,
                                                          error: str) -> None:
    handler, calls = scripted(response)
    obs = observe(probe("stripe_like.search", handler))
    assert (obs.authority, obs.error, len(calls)) == (Authority.UNAVAILABLE, error, 1)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback HTTP server that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in [*held, listener]:
        conn.close()


def test_a_hanging_read_is_cut_by_the_timeout(silent_server: str) -> None:
    p = recipe_factory("stripe_like.search")(
        "s", {"base_url": silent_server, "timeout_s": 0.2, "backoff_s": 0, "tries": 2}, {})
    started = time.monotonic()
    obs = observe(p)
    assert (obs.authority, obs.error) == (Authority.UNAVAILABLE, "ReadTimeout after 2 tries")
    assert time.monotonic() - started < 2


def test_the_deadline_bounds_all_tries_together(silent_server: str) -> None:
    p = recipe_factory("stripe_like.search")(
        "s", {"base_url": silent_server, "timeout_s": 5, "deadline_s": 0.3, "tries": 10}, {})
    started = time.monotonic()
    assert observe(p).authority is Authority.UNAVAILABLE
    assert time.monotonic() - started < 1.5


def test_an_observation_is_dated_when_its_answering_read_was_sent() -> None:
    # Safe for a lagging zero: the provider's state is at least as recent as the send time.
    ticks = iter(datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=s) for s in range(10))
    handler, _ = scripted(httpx.Response(503), httpx.Response(200, json={"data": []}))
    p = recipe_factory("stripe_like.search")(
        "s", {"base_url": BASE, "backoff_s": 0}, {}, transport=httpx.MockTransport(handler),
        clock=lambda: next(ticks))
    assert observe(p).at == datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)


# --- credentials and secrets ---------------------------------------------------------------


def test_missing_credentials_make_the_probe_unavailable_without_a_request() -> None:
    handler, calls = scripted(httpx.Response(200, json={"data": []}))
    obs = observe(probe("stripe_like.search", handler, token_env="UNSET_KEY"))
    assert (obs.authority, obs.error, calls) == (
        Authority.UNAVAILABLE, "credentials not set: UNSET_KEY", [])


def test_secrets_are_sent_but_never_shown() -> None:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers["Authorization"])
        return httpx.Response(401, json={"error": f"bad key {SECRET}"})

    p = probe("stripe_like.search", handler, token_env="PAY_KEY")
    obs = observe(p)
    assert sent == [f"Bearer {SECRET}"]
    assert obs.error == "HTTP 401"
    for shown in (repr(p), repr(obs), repr(p.spec)):
        assert SECRET not in shown
    assert "PAY_KEY" in repr(p)


@pytest.mark.parametrize(("key", "value"), [
    ("token", SECRET), ("api_key", SECRET), ("password", SECRET), ("client_secret", SECRET),
    ("authorization", f"Bearer {SECRET}"), ("headers", {"X-Api-Key": SECRET}),
    ("base_url", f"https://user:{SECRET}@pay.test/"),
])
def test_inline_secrets_in_the_config_are_refused(key: str, value: Any) -> None:
    config = {"providers": {"payments": {"probes": [
        {"use": "stripe_like.search", "base_url": BASE, key: value}]}}}
    with pytest.raises(ProbeConfigError) as caught:
        parse_config(config, env={}, registry=registry())
    message = str(caught.value)
    assert "token_env" in message and "payments" in message
    assert SECRET not in message


def test_an_inline_secret_at_provider_level_is_refused() -> None:
    with pytest.raises(ProbeConfigError, match="inline secret"):
        parse_config({"providers": {"mail": {"api_key": "abc"}}}, env={}, registry=registry())


# --- configuration -------------------------------------------------------------------------


def registry() -> ProbeRegistry:
    """The built-ins only, so an installed plugin cannot change these tests."""
    built = ProbeRegistry()
    built.register("http_json", http_json)
    for name in ("stripe_like.search", "stripe_like.idempotency_record", "slack_like.history"):
        built.register(name, recipe_factory(name))
    return built


CONFIG = """
[providers.payments]
idempotency_keys = true
key_retention_s = 86400
visibility_lag_s = 5
max_attempts = 3
reconcile_deadline_s = 600
compensable = false
[[providers.payments.probes]]
use = "stripe_like.search"
base_url = "http://127.0.0.1:8081/pay"
token_env = "PAYMENTS_API_KEY"
[[providers.payments.probes]]
use = "stripe_like.idempotency_record"
name = "payments.key_record"
base_url = "http://127.0.0.1:8081/pay"

[providers.chat]
[[providers.chat.probes]]
use = "http_json"
name = "chat.history"
base_url = "http://127.0.0.1:8081/chat"
path = "/api/conversations.history"
params = { channel = "{correlation[channel]}" }
items = "messages"
ref = "ts"
where = { "metadata.event_payload.operation_id" = "{operation_id}" }
authority = "weak"
"""


def test_a_config_file_gives_contracts_and_probes(tmp_path: Path) -> None:
    path = tmp_path / "probes.toml"
    path.write_text(CONFIG)
    providers = load_config(path, env={}, registry=registry())
    payments, chat = providers["payments"], providers["chat"]
    assert (payments.contract.idempotency_keys, payments.contract.visibility_lag_s,
            payments.contract.reconcile_deadline_s, payments.contract.compensable) == (
        True, 5.0, 600.0, False)
    assert [p.name for p in payments.probes] == ["stripe_like.search", "payments.key_record"]
    assert chat.contract.visibility_lag_s == 60.0  # the cautious default
    assert [p.name for p in chat.probes] == ["chat.history"]
    # Built without its credentials: the probe answers, unavailable, and names the variable.
    assert observe(payments.probes[0]).error == "credentials not set: PAYMENTS_API_KEY"


@pytest.mark.parametrize(("config", "error"), [
    ({"providers": {"p": {"probes": [{"use": "nope"}]}}}, "known probes: http_json, slack_like"),
    ({"providers": {"p": {"max_atempts": 3}}}, "unknown option.s.: max_atempts"),
    ({"providers": {"p": {"max_attempts": 0}}}, "'max_attempts' must be at least 1"),
    ({"providers": {"p": {"compensable": "no"}}}, "'compensable' must be true or false"),
    ({"providers": {"p": {"probes": [{"base_url": BASE}]}}}, "'use' .* is required"),
    ({"providers": {"p": {"probes": [{"use": "stripe_like.search", "base_url": BASE}] * 2}}},
     "used twice"),
    ({"providers": {"p": {"probes": [{"use": "http_json", "base_url": BASE, "method": "POST",
                                      "items": "", "ref": "id", "authority": "weak"}]}}},
     "'method' must be one of: GET"),
    ({"providers": {"p": {"probes": [{"use": "http_json", "base_url": BASE, "path": "/{op}",
                                      "items": "", "ref": "id", "authority": "weak"}]}}},
     "unknown placeholder {op}"),
    ({"providers": {"p": {"probes": [{"use": "http_json", "base_url": BASE, "ref": "id",
                                      "authority": "weak"}]}}}, "exactly one of 'items'"),
    ({"providers": {"p": {"probes": [{"use": "http_json", "base_url": BASE, "item": "",
                                      "ref": "id", "authority": "sure"}]}}},
     "'authority' must be one of: authoritative, lagging, weak"),
])
def test_config_errors_are_clear(config: dict[str, Any], error: str) -> None:
    with pytest.raises(ProbeConfigError, match=error) as caught:
        parse_config(config, env={}, registry=registry())
    assert str(caught.value).startswith("<config>: providers.p")


def test_an_unknown_probe_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownProbeError, match=r"known probes: http_json, slack_like\.history"):
        registry().build("stripe_like.serch", {}, {})
