"""The providers' official Python SDKs against the sandbox, unchanged but for the base URL:
each creates the effect (with an idempotency key where the provider has one), the sandbox loses
the answer (`lose_response`, armed for the next write since an SDK sends no header of ours),
the SDK times out, and the reconciler's recipe finds the effect, bound to the request by the
hash the agent attached where the provider keeps metadata.

This is the proof the sandbox speaks the providers' wire formats (docs/sandbox-api.md): a fake
the real clients cannot talk to would prove the probes against nothing real.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import postmarker.core
import pytest
import requests
import slack_sdk
import slack_sdk.errors
import stripe
import twilio.base.exceptions
import twilio.http.http_client
import twilio.rest
from githubkit import GitHub
from githubkit.exception import RequestTimeout
from stripe.params import PaymentIntentCreateParams

from probes.base import ProbeTarget
from probes.recipes import recipe_factory
from reconciler.domain import Authority, Match, Observation
from reconciler.hashing import request_hash
from reconciler.sandbox import RunningSandbox, running_sandbox

HOLD_S = 2.0
SDK_TIMEOUT_S = 0.5
OP = "op-sdk-1"
NOW = datetime.now(UTC)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox() as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(sandbox: RunningSandbox) -> None:
    sandbox.state.reset()
    sandbox.state.configure(hold_s=HOLD_S)


def lose_next_answer(sandbox: RunningSandbox, root: str) -> None:
    httpx.post(sandbox.url + "/_sandbox/faults",
               json={"provider": root, "fault": "lose_response"}).raise_for_status()


def target(**correlation: str) -> ProbeTarget:
    return ProbeTarget(OP, "key-" + OP, "p", "a", HASH, correlation, intent_at=NOW,
                       dispatched_at=NOW)


def observe(recipe: str, base_url: str, found: ProbeTarget, **options: Any) -> Observation:
    env = {"TWILIO_ACCOUNT_SID": ACCOUNT, "TWILIO_AUTH_TOKEN": "sandbox-token"}
    probe = recipe_factory(recipe)(recipe, {"base_url": base_url, "tries": 1, **options}, env)
    result = probe.probe(found)
    assert isinstance(result, Observation)
    return result


#: What the agent hashes (SPEC section 2) and then attaches to the effect's metadata.
PARAMS = {"operation_id": OP}
HASH = request_hash(PARAMS)
METADATA = {"operation_id": OP, "request_hash": HASH}
ACCOUNT = "AC0SDK"


def test_stripe_sdk_payment_intent_lost_then_found_by_the_list(sandbox: RunningSandbox) -> None:
    client = stripe.StripeClient(
        "sk_test_sandbox", base_addresses={"api": sandbox.url + "/pay"}, max_network_retries=0,
        http_client=stripe.HTTPXClient(timeout=SDK_TIMEOUT_S, allow_sync_methods=True))
    params: PaymentIntentCreateParams = {"amount": 1250, "currency": "eur", "confirm": True,
                                         "payment_method": "pm_card_visa", "metadata": METADATA}
    lose_next_answer(sandbox, "pay")

    with pytest.raises(stripe.APIConnectionError):
        client.v1.payment_intents.create(params, options={"idempotency_key": "key-" + OP})

    listed = observe("stripe.payment_intents.list", sandbox.url + "/pay", target(),
                     auth="none")
    [match] = listed.matches
    assert (listed.authority, match.request_hash) == (Authority.AUTHORITATIVE, HASH)
    # The same key again is Stripe's replay of the first intent, never a second one.
    again = client.v1.payment_intents.create(params, options={"idempotency_key": "key-" + OP})
    assert again.id == match.provider_ref and again.status == "succeeded"
    assert again.last_response is not None
    assert again.last_response.headers["Idempotent-Replayed"] == "true"
    by_id = observe("stripe.payment_intent", sandbox.url + "/pay",
                    target(payment_intent=again.id), auth="none")
    assert by_id.matches == (Match(again.id, HASH),)
    searched = observe("stripe.payment_intents.search", sandbox.url + "/pay", target(),
                       auth="none")
    assert searched.matches == by_id.matches


def test_stripe_sdk_reads_the_sandboxs_errors_as_stripes(sandbox: RunningSandbox) -> None:
    client = stripe.StripeClient("sk_test_sandbox", base_addresses={"api": sandbox.url + "/pay"},
                                 max_network_retries=0)
    with pytest.raises(stripe.CardError) as declined:
        client.v1.payment_intents.create({"amount": 500, "currency": "eur", "confirm": True,
                                          "payment_method": "pm_card_chargeDeclined"})
    assert declined.value.code == "card_declined"
    with pytest.raises(stripe.InvalidRequestError) as missing:
        client.v1.payment_intents.retrieve("pi_nope")
    assert missing.value.code == "resource_missing"


def test_slack_sdk_message_lost_then_found_in_the_history(sandbox: RunningSandbox) -> None:
    client = slack_sdk.WebClient(token="xoxb-sandbox", base_url=sandbox.url + "/chat/api/",
                                 timeout=1)
    metadata = {"event_type": "reconciler_operation", "event_payload": METADATA}
    lose_next_answer(sandbox, "chat")

    with pytest.raises((TimeoutError, socket.timeout)):
        client.chat_postMessage(channel="C0SDK", text="Deploy finished.", metadata=metadata)

    found = observe("slack.history", sandbox.url + "/chat", target(channel="C0SDK"),
                    auth="none")
    [match] = found.matches
    assert (found.authority, match.request_hash) == (Authority.AUTHORITATIVE, HASH)
    history = client.conversations_history(channel="C0SDK", include_all_metadata=True)
    assert history["messages"][0]["ts"] == match.provider_ref
    with pytest.raises(slack_sdk.errors.SlackApiError) as unknown:
        client.conversations_history(channel="#nowhere")
    assert unknown.value.response["error"] == "channel_not_found"


def test_githubkit_issue_lost_then_found_by_search_and_list(sandbox: RunningSandbox) -> None:
    github = GitHub("ghp_sandbox", base_url=sandbox.url + "/gh/", timeout=SDK_TIMEOUT_S,
                    auto_retry=False, http_cache=False)
    body = f"Seen twice today.\n<!-- reconciler:op={OP} -->"
    lose_next_answer(sandbox, "gh")

    with pytest.raises(RequestTimeout):
        github.rest.issues.create("acme", "sdk", title="Flaky deploy", body=body)

    repo = {"owner": "acme", "repo": "sdk"}
    # The sandbox opens every issue as its token's user, sandbox-bot.
    mine = {"auth": "none", "account": "sandbox-bot"}
    searched = observe("github.search", sandbox.url + "/gh", target(**repo), least_lag_s=0,
                       **mine)
    listed = observe("github.issues.list", sandbox.url + "/gh", target(**repo), least_lag_s=0,
                     **mine)
    [match] = searched.matches
    assert listed.matches == searched.matches
    issue = github.rest.issues.get("acme", "sdk", int(match.provider_ref)).parsed_data
    assert issue.body == body and issue.state == "open"
    by_number = observe("github.issue", sandbox.url + "/gh",
                        target(**repo, issue_number=match.provider_ref), **mine)
    assert by_number.matches == searched.matches


def test_postmarker_email_lost_then_found_by_the_outbound_search(sandbox: RunningSandbox) -> None:
    client = postmarker.core.PostmarkClient(server_token="sandbox-token", timeout=SDK_TIMEOUT_S,
                                            root_api_url=sandbox.url)
    lose_next_answer(sandbox, "mail")

    with pytest.raises(requests.exceptions.ReadTimeout):
        client.emails.send(From="agent@example.test", To="customer@example.test",
                           Subject="Your booking", TextBody="Booked.", Metadata=METADATA)

    found = observe("postmark.outbound", sandbox.url, target(), auth="none", least_lag_s=0)
    [match] = found.matches
    assert (found.authority, match.request_hash) == (Authority.LAGGING, HASH)
    details = observe("postmark.details", sandbox.url, target(message_id=match.provider_ref),
                      auth="none")
    assert details.matches == found.matches
    with pytest.raises(postmarker.exceptions.ClientError) as missing:
        client.messages.outbound.get("00000000-0000-0000-0000-000000000000")
    assert missing.value.error_code == 701


def test_twilio_sdk_message_lost_then_found_by_sid_and_hinted_by_the_list(
        sandbox: RunningSandbox) -> None:
    client = twilio.rest.Client(ACCOUNT, "sandbox-token", http_client=(
        twilio.http.http_client.TwilioHttpClient(timeout=SDK_TIMEOUT_S)))
    client.api.base_url = sandbox.url + "/twilio"
    sent = client.messages.create(to="+15550001111", from_="+15550002222", body="Booked.")
    assert sent.status == "queued"
    lose_next_answer(sandbox, "twilio")

    with pytest.raises(requests.exceptions.ReadTimeout):
        client.messages.create(to="+15550003333", from_="+15550002222", body="Booked.")

    # No metadata to find it by: the list by `To` is a hint, weak whatever it shows.
    hint = observe("twilio.messages.list", sandbox.url + "/twilio", target(to="+15550003333"),
                   account_sid=ACCOUNT)
    [match] = hint.matches
    assert hint.authority is Authority.WEAK
    by_sid = observe("twilio.message", sandbox.url + "/twilio",
                     target(message_sid=match.provider_ref), account_sid=ACCOUNT)
    assert (by_sid.authority, by_sid.matches) == (Authority.AUTHORITATIVE, (match,))
    assert [m.sid for m in client.messages.list(to="+15550003333")] == [match.provider_ref]
    with pytest.raises(twilio.base.exceptions.TwilioRestException) as missing:
        client.messages("SM" + "0" * 32).fetch()
    assert missing.value.code == 20404


def test_slack_sdk_thread_reply_is_found_by_replies_and_not_in_the_history(
        sandbox: RunningSandbox) -> None:
    client = slack_sdk.WebClient(token="xoxb-sandbox", base_url=sandbox.url + "/chat/api/")
    parent = client.chat_postMessage(channel="C0SDK", text="Deploying.")["ts"]
    metadata = {"event_type": "reconciler_operation", "event_payload": METADATA}
    client.chat_postMessage(channel="C0SDK", text="Done.", thread_ts=parent, metadata=metadata)

    history = observe("slack.history", sandbox.url + "/chat", target(channel="C0SDK"),
                      auth="none")
    replies = observe("slack.replies", sandbox.url + "/chat",
                      target(channel="C0SDK", thread_ts=parent), auth="none")

    assert (history.authority, history.matches) == (Authority.AUTHORITATIVE, ())
    [match] = replies.matches
    assert match.request_hash == HASH
    thread = client.conversations_replies(channel="C0SDK", ts=parent)["messages"]
    assert [m["ts"] for m in thread] == [parent, match.provider_ref]
