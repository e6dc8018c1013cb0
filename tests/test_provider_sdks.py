"""The providers' official Python SDKs against the sandbox, unchanged but for the base URL:
each creates the effect (with an idempotency key where the provider has one), the sandbox loses
the answer (`lose_response`, armed for the next write since an SDK sends no header of ours),
the SDK times out, and the reconciler's recipe finds the effect, bound to the request by the
hash the agent attached where the provider keeps metadata; then the reads the recipes must
survive (a lagging search, a short page, an incomplete search, a late commit).

This is the proof the sandbox speaks the providers' wire formats (docs/sandbox-api.md): a fake
the real clients cannot talk to would prove the probes against nothing real. The error cases
(credentials, unknown routes, bad parameters, rate limits) are in test_provider_sdk_errors.py.
"""

from __future__ import annotations

import socket

import postmarker.exceptions
import pytest
import requests
import stripe
import twilio.base.exceptions
from githubkit.exception import RequestTimeout
from stripe.params import PaymentIntentCreateParams, PaymentIntentSearchParams

from reconciler.core.domain import Authority, Match
from reconciler.sandbox import RunningSandbox
from reconciler.testing import ManualClock
from reconciler.testing.sandbox import on_manual_clock

from sandbox_harness import wait_until
from sdk_clients import (
    ACCOUNT,
    HASH,
    METADATA,
    OP,
    arm,
    checked,
    githubkit_client,
    observe,
    postmark_client,
    pygithub_client,
    slack_client,
    stripe_client,
    target,
    twilio_client,
)

HOLD_S = 2.0
SDK_TIMEOUT_S = 0.5
SEARCH_LAG_S = 60.0


@pytest.fixture(autouse=True)
def fresh(sandbox: RunningSandbox) -> None:
    checked(sandbox, hold_s=HOLD_S)


def intent(amount: int = 1250, **metadata: str) -> PaymentIntentCreateParams:
    return {"amount": amount, "currency": "eur", "confirm": True,
            "payment_method": "pm_card_visa", "metadata": metadata or METADATA}


def test_stripe_sdk_payment_intent_lost_then_found_by_the_list(sandbox: RunningSandbox) -> None:
    client = stripe_client(sandbox, timeout_s=SDK_TIMEOUT_S)
    arm(sandbox, "pay", "lose_response")

    with pytest.raises(stripe.APIConnectionError):
        client.v1.payment_intents.create(intent(), options={"idempotency_key": "key-" + OP})

    listed = observe("stripe.payment_intents.list", sandbox.url + "/pay", target())
    [match] = listed.matches
    assert (listed.authority, match.request_hash) == (Authority.AUTHORITATIVE, HASH)
    # The same key again is Stripe's replay of the first intent, never a second one.
    again = client.v1.payment_intents.create(intent(), options={"idempotency_key": "key-" + OP})
    assert again.id == match.provider_ref and again.status == "succeeded"
    assert again.last_response is not None
    assert again.last_response.headers["Idempotent-Replayed"] == "true"
    by_id = observe("stripe.payment_intent", sandbox.url + "/pay",
                    target(payment_intent=again.id))
    assert by_id.matches == (Match(again.id, HASH),)
    searched = observe("stripe.payment_intents.search", sandbox.url + "/pay", target())
    assert searched.matches == by_id.matches


def test_stripe_sdk_search_speaks_stripes_query_language(sandbox: RunningSandbox) -> None:
    client = stripe_client(sandbox)
    small = client.v1.payment_intents.create(intent(900, team="a"))
    large = client.v1.payment_intents.create(intent(5000, team="b"))
    client.v1.payment_intents.create({"amount": 7000, "currency": "usd",
                                      "metadata": {"team": "b"}})

    def found(query: str) -> set[str]:
        return {pi.id for pi in client.v1.payment_intents.search({"query": query}).data}

    assert found("status:'succeeded' AND amount>1000") == {large.id}
    assert found('metadata["team"]:"a" OR amount<=900') == {small.id}
    assert found("-currency:'usd' AND metadata['team']:'b'") == {large.id}
    assert found(f"created>={small.created} AND currency:'EUR'") == {small.id, large.id}
    assert found("metadata['nobody']:null AND amount>=7000") == {found("currency:'usd'").pop()}
    page = client.v1.payment_intents.search({"query": "amount>0", "limit": 2})
    rest = client.v1.payment_intents.search({"query": "amount>0", "page": page.next_page or ""})
    assert page.has_more and len(page.data) == 2 and len(rest.data) == 1
    assert not rest.has_more


def test_stripe_sdk_search_lags_behind_the_list_as_stripe_documents(
        sandbox: RunningSandbox) -> None:
    # https://docs.stripe.com/search#data-freshness: "don't use search for read-after-write".
    clock = on_manual_clock(sandbox, ManualClock())
    sandbox.state.configure(search_lag_s=SEARCH_LAG_S)
    client = stripe_client(sandbox)
    made = client.v1.payment_intents.create(intent())
    query: PaymentIntentSearchParams = {"query": f"metadata['operation_id']:'{OP}'"}

    assert client.v1.payment_intents.search(query).data == []
    assert [pi.id for pi in client.v1.payment_intents.list().data] == [made.id]
    clock.advance(SEARCH_LAG_S)
    assert [pi.id for pi in client.v1.payment_intents.search(query).data] == [made.id]


def test_stripe_sdk_request_held_past_its_timeout_commits_later(sandbox: RunningSandbox) -> None:
    client = stripe_client(sandbox, timeout_s=SDK_TIMEOUT_S)
    arm(sandbox, "pay", f"delay={SDK_TIMEOUT_S * 5}")

    with pytest.raises(stripe.APIConnectionError):
        client.v1.payment_intents.create(intent())
    assert client.v1.payment_intents.list().data == []

    wait_until(lambda: len(sandbox.state.objects()) == 1)
    late = observe("stripe.payment_intents.list", sandbox.url + "/pay", target())
    assert [m.request_hash for m in late.matches] == [HASH]


def test_slack_sdk_message_lost_then_found_in_the_history(sandbox: RunningSandbox) -> None:
    client = slack_client(sandbox, timeout_s=1)
    metadata = {"event_type": "reconciler_operation", "event_payload": METADATA}
    arm(sandbox, "chat", "lose_response")

    with pytest.raises((TimeoutError, socket.timeout)):
        client.chat_postMessage(channel="C0SDK", text="Deploy finished.", metadata=metadata)

    found = observe("slack.history", sandbox.url + "/chat", target(channel="C0SDK"))
    [match] = found.matches
    assert (found.authority, match.request_hash) == (Authority.AUTHORITATIVE, HASH)
    history = client.conversations_history(channel="C0SDK", include_all_metadata=True)
    assert history["messages"][0]["ts"] == match.provider_ref


def test_slack_sdk_thread_reply_is_found_by_replies_and_not_in_the_history(
        sandbox: RunningSandbox) -> None:
    client = slack_client(sandbox)
    parent = client.chat_postMessage(channel="C0SDK", text="Deploying.")["ts"]
    metadata = {"event_type": "reconciler_operation", "event_payload": METADATA}
    client.chat_postMessage(channel="C0SDK", text="Done.", thread_ts=parent, metadata=metadata)

    history = observe("slack.history", sandbox.url + "/chat", target(channel="C0SDK"))
    replies = observe("slack.replies", sandbox.url + "/chat",
                      target(channel="C0SDK", thread_ts=parent))

    assert (history.authority, history.matches) == (Authority.AUTHORITATIVE, ())
    [match] = replies.matches
    assert match.request_hash == HASH
    thread = client.conversations_replies(channel="C0SDK", ts=parent)["messages"]
    assert [m["ts"] for m in thread] == [parent, match.provider_ref]


def test_slack_sdk_message_without_metadata_has_no_metadata_key(sandbox: RunningSandbox) -> None:
    client = slack_client(sandbox)
    posted = client.chat_postMessage(channel="C0SDK", text="Plain.")

    [message] = client.conversations_history(channel="C0SDK",
                                             include_all_metadata=True)["messages"]
    assert "metadata" not in message and "metadata" not in posted["message"]


def test_slack_short_page_has_more_and_the_cursor_reads_the_rest(sandbox: RunningSandbox) -> None:
    client = slack_client(sandbox)
    sent = [client.chat_postMessage(channel="C0SDK", text=f"n{i}")["ts"] for i in range(4)]
    arm(sandbox, "chat", "short_page", on="read")

    short = client.conversations_history(channel="C0SDK", limit=4)
    rest = client.conversations_history(channel="C0SDK", limit=4,
                                        cursor=short["response_metadata"]["next_cursor"])

    assert len(short["messages"]) < 4 and short["has_more"] is True
    assert [m["ts"] for m in short["messages"] + rest["messages"]] == sent[::-1]


def test_slack_recipe_reads_past_a_short_page(sandbox: RunningSandbox) -> None:
    client = slack_client(sandbox)
    metadata = {"event_type": "reconciler_operation", "event_payload": METADATA}
    client.chat_postMessage(channel="C0SDK", text="Done.", metadata=metadata)
    client.chat_postMessage(channel="C0SDK", text="Later chatter.")
    arm(sandbox, "chat", "short_page", on="read")

    found = observe("slack.history", sandbox.url + "/chat", target(channel="C0SDK"))

    assert [m.request_hash for m in found.matches] == [HASH]


def test_slack_recipe_meets_a_rate_limit_as_no_zero_and_reads_again_when_asked(
        sandbox: RunningSandbox) -> None:
    metadata = {"event_type": "reconciler_operation", "event_payload": METADATA}
    slack_client(sandbox).chat_postMessage(channel="C0SDK", text="Done.", metadata=metadata)
    # One second: the pause closes the recipes' shared Slack budget for everyone in-process.
    arm(sandbox, "chat", "rate_limit=1", on="read")

    limited = observe("slack.history", sandbox.url + "/chat", target(channel="C0SDK"))

    assert (limited.authority, limited.matches) == (Authority.UNAVAILABLE, ())
    assert "429" in str(limited.error)
    wait_until(lambda: observe("slack.history", sandbox.url + "/chat",
                               target(channel="C0SDK")).matches != (), timeout_s=10)


def test_githubkit_issue_lost_then_found_by_search_and_list(sandbox: RunningSandbox) -> None:
    github = githubkit_client(sandbox, timeout_s=SDK_TIMEOUT_S)
    body = f"Seen twice today.\n<!-- reconciler:op={OP} -->"
    arm(sandbox, "gh", "lose_response")

    with pytest.raises(RequestTimeout):
        github.rest.issues.create("acme", "sdk", title="Flaky deploy", body=body)

    repo = {"owner": "acme", "repo": "sdk"}
    # The sandbox opens every issue as its token's user, sandbox-bot.
    mine = {"account": "sandbox-bot"}
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


def test_githubkit_parses_search_answers_and_the_repository(sandbox: RunningSandbox) -> None:
    github = githubkit_client(sandbox)
    github.rest.issues.create("acme", "sdk", title="Flaky", body=f"x <!-- reconciler:op={OP} -->")

    found = github.rest.search.issues_and_pull_requests(q=f"reconciler:op={OP} repo:acme/sdk")
    repository = github.rest.repos.get("acme", "sdk").parsed_data

    [item] = found.parsed_data.items
    assert (found.parsed_data.search_type, item.score) == ("lexical", 1.0)
    assert (repository.full_name, repository.open_issues_count) == ("acme/sdk", 1)


def test_github_incomplete_search_is_marked_and_never_read_as_a_zero(
        sandbox: RunningSandbox) -> None:
    github = githubkit_client(sandbox)
    github.rest.issues.create("acme", "sdk", title="Flaky", body=f"x <!-- reconciler:op={OP} -->")
    arm(sandbox, "gh", "incomplete_results", on="read")

    cut = observe("github.search", sandbox.url + "/gh", target(owner="acme", repo="sdk"),
                  least_lag_s=0, account="sandbox-bot")

    assert cut.matches == () and cut.authority is Authority.UNAVAILABLE
    arm(sandbox, "gh", "incomplete_results", on="read")
    marked = github.rest.search.issues_and_pull_requests(q="reconciler repo:acme/sdk")
    assert marked.parsed_data.incomplete_results is True


def test_pygithub_get_repo_then_create_issue_and_read_it_back(sandbox: RunningSandbox) -> None:
    repo = pygithub_client(sandbox).get_repo("acme/sdk")
    body = f"Seen once.\n<!-- reconciler:op={OP} -->"

    opened = repo.create_issue(title="Flaky deploy", body=body)

    assert repo.full_name == "acme/sdk"
    again = repo.get_issue(opened.number)
    assert (again.title, again.body, again.state) == ("Flaky deploy", body, "open")
    found = observe("github.issue", sandbox.url + "/gh",
                    target(owner="acme", repo="sdk", issue_number=str(opened.number)),
                    account="sandbox-bot")
    assert [m.provider_ref for m in found.matches] == [str(opened.number)]


def test_postmarker_email_lost_then_found_by_the_outbound_search(sandbox: RunningSandbox) -> None:
    client = postmark_client(sandbox, timeout_s=SDK_TIMEOUT_S)
    arm(sandbox, "mail", "lose_response")

    with pytest.raises(requests.exceptions.ReadTimeout):
        client.emails.send(From="agent@example.test", To="customer@example.test",
                           Subject="Your booking", TextBody="Booked.", Metadata=METADATA)

    found = observe("postmark.outbound", sandbox.url, target(), least_lag_s=0)
    [match] = found.matches
    assert (found.authority, match.request_hash) == (Authority.LAGGING, HASH)
    details = observe("postmark.details", sandbox.url, target(message_id=match.provider_ref))
    assert details.matches == found.matches
    with pytest.raises(postmarker.exceptions.ClientError) as missing:
        client.messages.outbound.get("00000000-0000-0000-0000-000000000000")
    assert missing.value.error_code == 701


def test_twilio_sdk_message_lost_then_found_by_sid_and_hinted_by_the_list(
        sandbox: RunningSandbox) -> None:
    client = twilio_client(sandbox, timeout_s=SDK_TIMEOUT_S)
    sent = client.messages.create(to="+15550001111", from_="+15550002222", body="Booked.")
    assert sent.status == "queued"
    arm(sandbox, "twilio", "lose_response")

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
