"""Each recipe against its provider's real answer shapes (httpx.MockTransport, no network):
the request it sends, what it matches, and the reads that prove no zero (a page cut short, an
incomplete search, a rate limit, a 404 that may be the wrong account or mode, a status that is
not the effect). The shapes follow the providers' API references cited in docs/probes.md.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from probes.config import parse_config
from probes.errors import ProbeConfigError
from probes.recipes import RECIPES
from probes.recipes.recipe import CAUTIOUS_INFLIGHT_S
from probes.registry import default_registry
from reconciler.core.domain import Authority, Match, Observation

from probe_harness import BASE, OP, SECRET, Handler, answer, charge, observe, probe, target


def pages(*responses: httpx.Response) -> tuple[Handler, list[httpx.Request]]:
    """A handler answering `responses` in order, and the requests it saw."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return responses[min(len(seen), len(responses)) - 1]

    return handler, seen


def json(body: Any, status: int = 200, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


def cut(obs: Observation, why: str) -> None:
    assert obs.authority is Authority.UNAVAILABLE and obs.matches == ()
    assert obs.error is not None and why in obs.error, obs.error


# --- Stripe -------------------------------------------------------------------------------


def stripe_list(*objects: dict[str, Any], more: bool = False) -> httpx.Response:
    return json({"object": "list", "url": "/v1/payment_intents", "has_more": more,
                 "data": list(objects)})


def test_stripe_list_reads_the_created_window_and_follows_starting_after() -> None:
    handler, seen = pages(stripe_list(charge("pi_9", op="op-2"), charge("pi_8"), more=True),
                          stripe_list(charge("pi_7", op="op-3")))
    obs = observe(probe("stripe.payment_intents.list", handler))
    assert (obs.authority, obs.matches) == (
        Authority.AUTHORITATIVE, (Match("pi_8", "sha256:pi_8"),))
    first, second = (dict(r.url.params) for r in seen)
    # 2026-01-01T12:00Z less five minutes, for the provider's clock.
    assert first == {"created[gte]": "1767268500", "limit": "100"}
    assert second == {**first, "starting_after": "pi_8"}
    assert seen[0].url.path == "/pay/v1/payment_intents"
    assert seen[0].headers["Authorization"] == f"Bearer {SECRET}"


def test_stripe_list_with_more_pages_than_it_may_read_is_no_zero() -> None:
    handler, seen = pages(stripe_list(charge("pi_9", op="op-2"), more=True))
    cut(observe(probe("stripe.payment_intents.list", handler, max_pages=3)), "max_pages = 3")
    assert len(seen) == 3


def test_stripe_has_more_without_a_last_id_is_a_cut_read() -> None:
    handler, _ = pages(stripe_list(more=True))
    cut(observe(probe("stripe.charges.list", handler)), "has no last 'id'")


@pytest.mark.parametrize(("status", "effect"), [
    ("succeeded", True), ("processing", True), ("requires_capture", True),
    ("canceled", False), ("requires_action", None),
    # Never confirmed (no last_payment_error): it may still become a payment.
    ("requires_payment_method", None)])
def test_a_payment_intent_is_the_effect_only_in_an_effect_status(status: str,
                                                                 effect: bool | None) -> None:
    obs = observe(probe("stripe.payment_intents.list", answer(
        {"object": "list", "has_more": False, "data": [charge("pi_1", status=status)]})))
    if effect:
        assert obs.matches == (Match("pi_1", "sha256:pi_1"),)
    elif effect is False:  # canceled: not the effect, and a complete read: a zero
        assert (obs.authority, obs.matches) == (Authority.AUTHORITATIVE, ())
    else:  # may still become a payment: proves no zero
        cut(obs, "status that decides nothing yet")


DECLINE = {"type": "card_error", "code": "card_declined", "decline_code": "generic_decline",
           "message": "Your card was declined."}


def test_a_payment_intent_stripe_declined_is_not_the_effect_and_its_read_is_a_zero() -> None:
    declined = {**charge("pi_1", status="requires_payment_method"),
                "last_payment_error": DECLINE}
    for recipe in ("stripe.payment_intent", "stripe.payment_intents.list"):
        body = declined if recipe == "stripe.payment_intent" else {
            "object": "list", "has_more": False, "data": [declined]}
        obs = observe(probe(recipe, answer(body)))
        assert (obs.authority, obs.matches, obs.error) == (Authority.AUTHORITATIVE, (), None)


def test_a_failed_charge_is_not_the_effect() -> None:
    failed = charge("ch_1", status="failed", kind="charge")
    obs = observe(probe("stripe.charge", answer(failed)))
    assert (obs.authority, obs.matches) == (Authority.AUTHORITATIVE, ())
    ok = observe(probe("stripe.charge", answer(charge("ch_1", kind="charge"))))
    assert ok.matches == (Match("ch_1", "sha256:ch_1"),)


MISSING = {"error": {"type": "invalid_request_error", "code": "resource_missing",
                     "message": "No such payment_intent: 'pi_1'"}}


def test_a_stripe_404_without_a_pinned_account_and_mode_is_no_zero() -> None:
    # Stripe answers the same 404 for a key of the other mode or a missing Stripe-Account.
    obs = observe(probe("stripe.payment_intent", answer(MISSING, 404)))
    assert (obs.authority, obs.error) == (Authority.UNAVAILABLE, "HTTP 404 (resource_missing)")


def stripe_account(account: str, livemode: bool) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/v1/account"):
            return json({"id": account, "object": "account"})
        if request.url.path.endswith("/v1/balance"):
            return json({"object": "balance", "livemode": livemode})
        return json(MISSING, 404)
    return handler


def test_a_stripe_404_is_a_zero_once_the_key_is_shown_to_read_the_pinned_account_and_mode() -> None:
    pinned = {"account": "acct_1", "livemode": False}
    zero = observe(probe("stripe.payment_intent", stripe_account("acct_1", False), **pinned))
    assert (zero.authority, zero.matches, zero.error) == (Authority.AUTHORITATIVE, (), None)
    wrong_mode = observe(probe("stripe.payment_intent", stripe_account("acct_1", True), **pinned))
    cut(wrong_mode, "another account or mode")
    wrong_account = observe(probe("stripe.payment_intent", stripe_account("acct_2", False),
                                  **pinned))
    cut(wrong_account, "another account or mode")
    with pytest.raises(ProbeConfigError, match="both 'account'"):
        probe("stripe.payment_intent", answer({}), account="acct_1")


def test_a_connect_probe_sends_stripe_account() -> None:
    handler, seen = pages(json(charge("pi_1")))
    observe(probe("stripe.payment_intent", handler, headers={"Stripe-Account": "acct_9"}))
    assert seen[0].headers["Stripe-Account"] == "acct_9"


def test_stripe_search_is_lagging_and_follows_next_page() -> None:
    handler, seen = pages(
        json({"object": "search_result", "has_more": True, "next_page": "tok2",
              "data": [charge("pi_1", op="op-2")]}),
        json({"object": "search_result", "has_more": False, "next_page": None,
              "data": [charge("pi_2")]}))
    obs = observe(probe("stripe.payment_intents.search", handler))
    assert (obs.authority, obs.matches) == (Authority.LAGGING, (Match("pi_2", "sha256:pi_2"),))
    assert seen[0].url.params["query"] == "metadata['operation_id']:'op-1'"
    assert seen[1].url.params["page"] == "tok2"


# --- Slack --------------------------------------------------------------------------------


def slack_page(*ops: str, more: bool = False, cursor: str = "") -> httpx.Response:
    messages = [{"type": "message", "ts": f"1767268800.00000{i}", "text": "hi",
                 "metadata": {"event_type": "reconciler_operation",
                              "event_payload": {"operation_id": op,
                                                "request_hash": f"sha256:{op}"}}}
                for i, op in enumerate(ops)]
    return json({"ok": True, "messages": messages, "has_more": more,
                 "response_metadata": {"next_cursor": cursor}})


def test_slack_history_reads_from_the_intent_and_follows_the_cursor() -> None:
    handler, seen = pages(slack_page("op-2", more=True, cursor="bmV4dA=="), slack_page(OP))
    obs = observe(probe("slack.history", handler))
    assert (obs.authority, obs.matches) == (
        Authority.AUTHORITATIVE, (Match("1767268800.000000", "sha256:op-1"),))
    assert dict(seen[0].url.params) == {"channel": "C1", "oldest": "1767268500.000000",
                                        "include_all_metadata": "true", "limit": "15"}
    assert seen[1].url.params["cursor"] == "bmV4dA=="


def test_a_slack_page_cut_short_with_has_more_and_no_match_is_unavailable_never_a_zero() -> None:
    # Slack may return fewer messages than asked, with has_more: true; without the next page
    # (no cursor given, or no time left to read it) the history was not read.
    no_cursor, _ = pages(slack_page("op-2", more=True))
    cut(observe(probe("slack.history", no_cursor)), "has_more is true")
    endless, _ = pages(slack_page("op-2", more=True, cursor="again"))
    cut(observe(probe("slack.history", endless, max_pages=2)), "max_pages = 2")


def test_a_cut_slack_read_keeps_the_match_it_found() -> None:
    handler, _ = pages(slack_page(OP, more=True))
    obs = observe(probe("slack.history", handler))
    assert (obs.authority, len(obs.matches)) == (Authority.AUTHORITATIVE, 1)


def test_slack_ok_false_is_no_answer() -> None:
    obs = observe(probe("slack.history", answer({"ok": False, "error": "channel_not_found"})))
    assert obs.error == "the response failed the check on 'ok' (channel_not_found)"


def test_slack_thread_replies_are_read_by_the_threads_ts() -> None:
    handler, seen = pages(slack_page(OP))
    in_thread = target(correlation={"channel": "C1", "thread_ts": "1700000000.000100"})
    obs = observe(probe("slack.replies", handler), in_thread)
    assert len(obs.matches) == 1
    assert seen[0].url.path.endswith("/api/conversations.replies")
    assert seen[0].url.params["ts"] == "1700000000.000100"


def test_a_slack_rate_limit_is_waited_out_as_retry_after_asks() -> None:
    handler, seen = pages(json({"ok": False, "error": "ratelimited"}, 429, **{"Retry-After": "0"}),
                          slack_page(OP))
    assert len(observe(probe("slack.history", handler)).matches) == 1 and len(seen) == 2


def test_a_rate_limit_longer_than_the_deadline_ends_the_read() -> None:
    handler, seen = pages(json({"ok": False, "error": "ratelimited"}, 429, **{"Retry-After": "60"}))
    cut(observe(probe("slack.history", handler, deadline_s=1)), "rate limited")
    assert len(seen) == 1


# --- GitHub -------------------------------------------------------------------------------


ACCOUNT = "octo-bot"


def issue(number: int, op: str, author: str = ACCOUNT) -> dict[str, Any]:
    return {"id": 1000 + number, "number": number, "title": "t", "state": "open",
            "body": f"text\n<!-- reconciler:op={op} -->", "user": {"login": author}}


def github(recipe: str, handler: Handler, **options: Any) -> Any:
    """A GitHub recipe's probe for the worker's account `octo-bot`."""
    return probe(recipe, handler, account=ACCOUNT, **options)


def test_github_search_quotes_the_marker_and_matches_it_exactly() -> None:
    handler, seen = pages(json({"total_count": 2, "incomplete_results": False,
                                "items": [issue(7, OP), issue(8, "op-10")]}))
    obs = observe(github("github.search", handler))
    assert (obs.authority, obs.matches) == (Authority.LAGGING, (Match("7"),))
    assert seen[0].url.params["q"] == '"reconciler:op=op-1" repo:octo/hello in:body'
    assert seen[0].headers["Accept"] == "application/vnd.github+json"


def test_a_github_search_with_incomplete_results_and_no_match_is_unavailable() -> None:
    handler, _ = pages(json({"total_count": 0, "incomplete_results": True, "items": []}))
    cut(observe(github("github.search", handler)), "incomplete_results")
    found, _ = pages(json({"total_count": 1, "incomplete_results": True, "items": [issue(7, OP)]}))
    assert observe(github("github.search", found)).matches == (Match("7"),)


def test_github_issue_list_reads_since_the_intent_and_follows_link() -> None:
    nxt = "http://provider.test/pay/repos/octo/hello/issues?page=2&since=x"
    link = f'<{nxt}>; rel="next", <{nxt}>; rel="last"'
    handler, seen = pages(json([issue(3, "op-2")], link=link), json([issue(2, OP)]))
    obs = observe(github("github.issues.list", handler))
    assert (obs.authority, obs.matches) == (Authority.LAGGING, (Match("2"),))
    assert seen[0].url.params["since"] == "2026-01-01T11:55:00Z"
    assert str(seen[1].url) == nxt


def test_a_next_link_to_another_host_is_not_followed() -> None:
    handler, seen = pages(json([], link='<https://elsewhere.test/issues?page=2>; rel="next"'))
    cut(observe(github("github.issues.list", handler)), "another host")
    assert len(seen) == 1


def test_a_spent_github_rate_limit_is_no_permission_error_and_no_zero() -> None:
    limited = json({"message": "API rate limit exceeded"}, 403,
                   **{"x-ratelimit-remaining": "0", "x-ratelimit-reset": "9999999999"})
    handler, seen = pages(limited)
    cut(observe(github("github.search", handler)), "rate limited")
    assert len(seen) == 1  # the reset is past the deadline: not asked again


def test_github_issue_by_number() -> None:
    handler, seen = pages(json(issue(7, OP)))
    assert observe(github("github.issue", handler)).matches == (Match("7"),)
    assert seen[0].url.path == "/pay/repos/octo/hello/issues/7"
    gone = observe(github("github.issue", answer({"message": "Not Found"}, 404)))
    assert gone.authority is Authority.UNAVAILABLE  # also a repository the token cannot see


# --- Postmark -----------------------------------------------------------------------------


def message(mid: str, op: str, status: str = "Sent") -> dict[str, Any]:
    return {"MessageID": mid, "Status": status, "To": [{"Email": "a@example.com"}],
            "Metadata": {"operation_id": op, "request_hash": f"sha256:{mid}"}}


def test_postmark_outbound_search_filters_by_metadata_and_pages_by_offset() -> None:
    handler, seen = pages(
        json({"TotalCount": 3, "Messages": [message("m-1", "op-2"), message("m-2", OP)]}),
        json({"TotalCount": 3, "Messages": [message("m-3", OP, status="Queued")]}))
    obs = observe(probe("postmark.outbound", handler, params={"count": "2"}))
    assert obs.authority is Authority.LAGGING
    assert obs.matches == (Match("m-2", "sha256:m-2"), Match("m-3", "sha256:m-3"))
    first = seen[0]
    assert first.headers["Accept"] == "application/json"
    assert first.headers["X-Postmark-Server-Token"] == SECRET
    assert first.url.params["metadata_operation_id"] == OP
    assert first.url.params["fromdate"] == "2026-01-01T06:55:00"  # US Eastern, never later
    assert seen[1].url.params["offset"] == "2"


def test_postmark_more_than_ten_thousand_messages_is_a_cut_read() -> None:
    handler, _ = pages(json({"TotalCount": 20000, "Messages": [message("m-1", "op-2")] * 500}))
    cut(observe(probe("postmark.outbound", handler, max_pages=50)), "limit of 10000")


def test_a_postmark_422_is_never_a_zero() -> None:
    # 701 was seen for a queued message that was sent afterwards.
    obs = observe(probe("postmark.details", answer(
        {"ErrorCode": 701, "Message": "This message was not found."}, 422)))
    assert (obs.authority, obs.error) == (Authority.UNAVAILABLE, "HTTP 422 (701)")
    found = observe(probe("postmark.details", answer(message("m-1", OP))))
    assert (found.authority, found.matches) == (Authority.AUTHORITATIVE,
                                                (Match("m-1", "sha256:m-1"),))


# --- Twilio -------------------------------------------------------------------------------

TWILIO = {"account_sid": "AC1", "username_env": "ACCOUNT_SID"}


def sms(sid: str, status: str) -> dict[str, Any]:
    return {"sid": sid, "account_sid": "AC1", "to": "+15550001111", "status": status}


def test_twilio_message_by_sid_uses_basic_auth_and_reads_its_status() -> None:
    handler, seen = pages(json(sms("SM1", "delivered")))
    obs = observe(probe("twilio.message", handler, **TWILIO))
    assert (obs.authority, obs.matches) == (Authority.AUTHORITATIVE, (Match("SM1"),))
    assert seen[0].url.path == "/pay/2010-04-01/Accounts/AC1/Messages/SM1.json"
    expected = base64.b64encode(f"AC1:{SECRET}".encode()).decode()
    assert seen[0].headers["Authorization"] == f"Basic {expected}"
    failed = observe(probe("twilio.message", answer(sms("SM1", "failed")), **TWILIO))
    assert (failed.authority, failed.matches) == (Authority.AUTHORITATIVE, ())


@pytest.mark.parametrize(("status", "effect"), [
    ("partially_delivered", True), ("undelivered", True), ("delivered", True),
    ("failed", False), ("canceled", False)])
def test_every_terminal_twilio_status_decides_the_read(status: str, effect: bool) -> None:
    """partially_delivered and undelivered: the message left Twilio (a second send would be a
    second message); failed and canceled: nothing went out."""
    obs = observe(probe("twilio.message", answer(sms("SM1", status)), **TWILIO))
    assert obs.authority is Authority.AUTHORITATIVE and obs.error is None
    assert obs.matches == ((Match("SM1"),) if effect else ())


def test_twilio_list_is_weak_and_follows_next_page_uri() -> None:
    handler, seen = pages(
        json({"messages": [sms("SM2", "sent")],
              "next_page_uri": "/2010-04-01/Accounts/AC1/Messages.json?PageToken=PA2"}),
        json({"messages": [sms("SM3", "queued")], "next_page_uri": None}))
    obs = observe(probe("twilio.messages.list", handler, **TWILIO))
    assert (obs.authority, obs.matches) == (Authority.WEAK, (Match("SM2"), Match("SM3")))
    assert dict(seen[0].url.params) == {"To": "+15550001111", "DateSent>": "2026-01-01",
                                        "PageSize": "100"}
    assert seen[1].url.params["PageToken"] == "PA2"
    with pytest.raises(ProbeConfigError, match="proves at most 'weak'"):
        probe("twilio.messages.list", handler, authority="lagging", **TWILIO)


# --- every recipe -------------------------------------------------------------------------


def test_recipe_options_are_settable_and_merge_with_the_preset() -> None:
    handler, seen = pages(json({"ok": True, "messages": [], "has_more": False}))
    observe(probe("slack.history", handler, params={"limit": "200"}, hash="metadata.x"))
    assert seen[0].url.params["limit"] == "200" and seen[0].url.params["channel"] == "C1"


def test_a_window_needs_the_intents_time() -> None:
    obs = observe(probe("stripe.payment_intents.list", answer({})), target(intent_at=None))
    assert obs.error == "operation has no intent at"


def test_a_rotated_credential_is_used_from_the_next_call_on() -> None:
    env = {"KEY": "old"}
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        return json(charge("pi_1"))

    from probes.recipes import recipe_factory
    p = recipe_factory("stripe.payment_intent")(
        "p", {"base_url": "http://provider.test", "token_env": "KEY"}, env,
        transport=httpx.MockTransport(handler))
    observe(p)
    env["KEY"] = "new"
    observe(p)
    assert seen == ["Bearer old", "Bearer new"]


# --- Lag and in-flight defaults ---------------------------------------------------------


def contract_with(use: str, **table: Any) -> Any:
    probe_table = {"use": use, "base_url": BASE, "actions": ["send"], **(
        TWILIO if use.startswith("twilio.") else {})}
    providers = parse_config({"providers": {"p": {**table, "probes": [probe_table]}}},
                             env={"ACCOUNT_SID": "AC1"}, registry=default_registry())
    return providers["p"].contract


@pytest.mark.parametrize(("use", "inflight_s"), [
    ("stripe.payment_intents.list", 80.0), ("stripe.charge", 80.0),
    ("twilio.message", 60.0), ("slack.history", 60.0), ("postmark.outbound", 60.0)])
def test_a_provider_that_leaves_inflight_s_out_takes_its_recipes_figure(
        use: str, inflight_s: float) -> None:
    """Stripe's libraries wait 80 s for an answer; providers that document nothing take the
    cautious minute."""
    assert contract_with(use).inflight_s == inflight_s


def test_a_configured_inflight_s_wins_over_the_recipes() -> None:
    assert contract_with("stripe.payment_intents.list", inflight_s=0).inflight_s == 0.0


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_says_where_its_lag_and_inflight_come_from(name: str) -> None:
    recipe = RECIPES[name]
    assert "https://" in recipe.cite
    source = recipe.inflight.source
    assert "https://" in source or "undocumented" in source
    assert recipe.inflight.seconds >= CAUTIOUS_INFLIGHT_S
