"""The sandbox's refusals as each provider's official SDK reads them (the base URL changed only):
credentials checked as the provider checks them, unknown routes and bad parameters in the
provider's own error shape, a rate limit with the pause it asks for (`rate_limit=<s>`, armed
per request), and an unknown Slack channel. docs/sandbox-api.md, "Credentials" and "Errors".
"""

from __future__ import annotations

from datetime import timedelta

import github
import httpx
import postmarker.exceptions
import pytest
import slack_sdk.errors
import stripe
from githubkit.exception import RequestFailed, SecondaryRateLimitExceeded

from reconciler.sandbox import RunningSandbox

from sdk_clients import (
    arm,
    checked,
    githubkit_client,
    postmark_client,
    pygithub_client,
    slack_client,
    stripe_client,
)


@pytest.fixture(autouse=True)
def fresh(sandbox: RunningSandbox) -> None:
    checked(sandbox)


def bare(sandbox: RunningSandbox, method: str, path: str) -> httpx.Response:
    """A request with no credential at all (no SDK sends one without)."""
    return httpx.request(method, sandbox.url + path, timeout=5.0)


def test_unchecked_a_missing_credential_passes_and_a_malformed_one_is_refused(
        sandbox: RunningSandbox) -> None:
    sandbox.state.configure(check_credentials=False)

    assert bare(sandbox, "GET", "/pay/v1/payment_intents").status_code == 200
    with pytest.raises(stripe.AuthenticationError):
        stripe_client(sandbox, key="not-a-key").v1.payment_intents.list()


# --- Stripe ------------------------------------------------------------------------------------

def test_stripe_malformed_key_is_stripes_401(sandbox: RunningSandbox) -> None:
    with pytest.raises(stripe.AuthenticationError) as refused:
        stripe_client(sandbox, key="pk_test_publishable").v1.payment_intents.list()

    assert refused.value.http_status == 401
    assert refused.value.user_message is not None
    assert refused.value.user_message.startswith("Invalid API Key provided: pk_test_")


def test_stripe_missing_key_is_stripes_401(sandbox: RunningSandbox) -> None:
    answer = bare(sandbox, "GET", "/pay/v1/payment_intents")

    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert answer.json()["error"]["message"].startswith("You did not provide an API key.")


def test_stripe_unknown_route_is_unrecognized_request_url(sandbox: RunningSandbox) -> None:
    with pytest.raises(stripe.InvalidRequestError) as unknown:
        stripe_client(sandbox).raw_request("get", "/v1/nothing_here")

    assert unknown.value.http_status == 404
    assert str(unknown.value.user_message).startswith("Unrecognized request URL (GET: /v1/")


def test_stripe_bad_parameter_names_the_parameter(sandbox: RunningSandbox) -> None:
    with pytest.raises(stripe.InvalidRequestError) as invalid:
        stripe_client(sandbox).v1.payment_intents.list({"limit": 1000})

    assert (invalid.value.http_status, invalid.value.param) == (400, "limit")


@pytest.mark.parametrize(("query", "message"), [
    ("foo:'bar'", "Field `foo` is an unsupported search field for resource `payment_intents`."),
    ("amount>>1", "We were unable to parse your search query."),
    ("amount>1 AND status:'x' OR currency:'eur'", "Queries may not mix AND and OR clauses."),
])
def test_stripe_search_it_cannot_run_is_stripes_400(sandbox: RunningSandbox, query: str,
                                                    message: str) -> None:
    with pytest.raises(stripe.InvalidRequestError) as refused:
        stripe_client(sandbox).v1.payment_intents.search({"query": query})

    assert (refused.value.http_status, refused.value.param) == (400, "query")
    assert str(refused.value.user_message).startswith(message)


def test_stripe_rate_limit_is_a_429_with_retry_after(sandbox: RunningSandbox) -> None:
    arm(sandbox, "pay", "rate_limit=7", on="read")

    with pytest.raises(stripe.RateLimitError) as limited:
        stripe_client(sandbox).v1.payment_intents.list()

    assert limited.value.headers is not None and limited.value.error is not None
    assert limited.value.error.code == "rate_limit"
    assert limited.value.headers["Retry-After"] == "7"


# --- Slack -------------------------------------------------------------------------------------

def slack_error(call: slack_sdk.WebClient, method: str,
                **args: str) -> slack_sdk.errors.SlackApiError:
    with pytest.raises(slack_sdk.errors.SlackApiError) as refused:
        call.api_call(method, params=args)
    return refused.value


@pytest.mark.parametrize(("token", "error"), [(None, "not_authed"), ("bogus", "invalid_auth")])
def test_slack_credentials_are_refused_with_http_200_and_ok_false(
        sandbox: RunningSandbox, token: str | None, error: str) -> None:
    refused = slack_error(slack_client(sandbox, token=token), "conversations.history",
                          channel="C0SDK")

    assert refused.response.status_code == 200
    assert refused.response.data == {"ok": False, "error": error}


def test_slack_unknown_channel_is_channel_not_found(sandbox: RunningSandbox) -> None:
    client = slack_client(sandbox)
    client.chat_postMessage(channel="C0SDK", text="Another channel exists.")

    for channel in ("C0NOWHERE", "#nowhere"):
        with pytest.raises(slack_sdk.errors.SlackApiError) as unknown:
            client.conversations_history(channel=channel)
        assert unknown.value.response.data == {"ok": False, "error": "channel_not_found"}


def test_slack_unknown_method_and_bad_arguments(sandbox: RunningSandbox) -> None:
    client = slack_client(sandbox)
    client.chat_postMessage(channel="C0SDK", text="Here.")

    unknown = slack_error(client, "nothing.here")
    invalid = slack_error(client, "conversations.history", channel="C0SDK", limit="0")

    assert (unknown.response.status_code, unknown.response["error"]) == (404, "unknown_method")
    assert invalid.response["error"] == "invalid_arguments"


def test_slack_rate_limit_is_a_429_ratelimited_with_retry_after(sandbox: RunningSandbox) -> None:
    client = slack_client(sandbox)
    client.chat_postMessage(channel="C0SDK", text="Here.")
    arm(sandbox, "chat", "rate_limit=3", on="read")

    limited = slack_error(client, "conversations.history", channel="C0SDK")

    assert (limited.response.status_code, limited.response["error"]) == (429, "ratelimited")
    assert limited.response.headers["retry-after"] in ("3", ["3"])


# --- GitHub ------------------------------------------------------------------------------------

def test_github_bad_token_is_bad_credentials_for_githubkit_and_pygithub(
        sandbox: RunningSandbox) -> None:
    # (githubkit wants its client held while a call runs, hence the name.)
    bogus = githubkit_client(sandbox, token="bogus")
    with pytest.raises(RequestFailed) as refused:
        bogus.rest.issues.create("acme", "sdk", title="x")
    with pytest.raises(github.BadCredentialsException) as pygithub_refused:
        pygithub_client(sandbox, token="bogus").get_repo("acme/sdk")

    assert refused.value.response.status_code == 401
    assert refused.value.response.json()["message"] == "Bad credentials"
    assert "documentation_url" in refused.value.response.json()
    assert pygithub_refused.value.status == 401


def test_github_reads_without_a_token_and_refuses_a_write(sandbox: RunningSandbox) -> None:
    anonymous = githubkit_client(sandbox, token=None)

    assert anonymous.rest.repos.get("acme", "sdk").parsed_data.full_name == "acme/sdk"
    with pytest.raises(RequestFailed) as refused:
        anonymous.rest.issues.create("acme", "sdk", title="x")
    assert refused.value.response.status_code == 401
    assert refused.value.response.json()["message"] == "Requires authentication"
    assert sandbox.state.objects() == []


def test_github_unknown_route_and_bad_parameter_in_githubs_shape(sandbox: RunningSandbox) -> None:
    client = githubkit_client(sandbox)

    with pytest.raises(RequestFailed) as unknown:
        client.request("GET", "/nothing/here")
    with pytest.raises(RequestFailed) as invalid:
        client.rest.issues.list_for_repo("acme", "sdk", per_page=1000)

    assert unknown.value.response.status_code == 404
    assert unknown.value.response.json()["message"] == "Not Found"
    assert invalid.value.response.status_code == 422
    assert invalid.value.response.json()["message"] == "Validation Failed"


def test_github_rate_limit_is_a_secondary_limit_with_retry_after(sandbox: RunningSandbox) -> None:
    arm(sandbox, "gh", "rate_limit=4", on="read")

    client = githubkit_client(sandbox)
    with pytest.raises(SecondaryRateLimitExceeded) as limited:
        client.rest.repos.get("acme", "sdk")

    assert limited.value.retry_after == timedelta(seconds=4)


# --- Postmark ----------------------------------------------------------------------------------

def test_postmark_bad_or_missing_token_is_error_code_10(sandbox: RunningSandbox) -> None:
    with pytest.raises(postmarker.exceptions.ClientError) as refused:
        postmark_client(sandbox, token="bogus").emails.send(
            From="agent@example.test", To="customer@example.test", Subject="Hi",
            TextBody="Hi.")
    missing = bare(sandbox, "GET", "/messages/outbound?count=1&offset=0")

    assert refused.value.error_code == 10
    assert (missing.status_code, missing.json()["ErrorCode"]) == (401, 10)
    assert sandbox.state.objects() == []


def test_postmark_rate_limit_is_a_429_with_retry_after(sandbox: RunningSandbox) -> None:
    arm(sandbox, "mail", "rate_limit=5")

    with pytest.raises(postmarker.exceptions.ClientError) as limited:
        postmark_client(sandbox).emails.send(From="agent@example.test",
                                             To="customer@example.test", Subject="Hi",
                                             TextBody="Hi.")

    assert limited.value.error_code == 429
    assert sandbox.state.objects() == []
