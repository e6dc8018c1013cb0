"""The providers' official SDKs pointed at a sandbox, unchanged but for the base URL, and the
small steps every SDK test takes (arming a fault, reading with a recipe).

Each client carries the sandbox credential of its provider (`SANDBOX_CREDENTIALS`) unless a
test passes its own, so a test of the credential checks builds the same client with another.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import github
import httpx
import postmarker.core
import slack_sdk
import stripe
import twilio.http.http_client
import twilio.rest
from githubkit import GitHub

from probes.base import ProbeTarget
from probes.recipes import recipe_factory
from reconciler.core.domain import Observation
from reconciler.core.hashing import request_hash
from reconciler.sandbox import RunningSandbox, SystemClock
from reconciler.sandbox.credentials import SANDBOX_ENV

OP = "op-sdk-1"
#: What the agent hashes (SPEC section 2) and then attaches to the effect's metadata.
PARAMS = {"operation_id": OP}
HASH = request_hash(PARAMS)
METADATA = {"operation_id": OP, "request_hash": HASH}
ACCOUNT = "AC0SDK"
NOW = datetime.now(UTC)


def checked(sandbox: RunningSandbox, **config: float | bool) -> None:
    """`sandbox` emptied, on the real clock (the recipes read windows around the real now),
    on the default config (credentials checked as the providers do: the SDKs and recipes here
    send theirs) but for `config`."""
    sandbox.state.reset()
    sandbox.state.clock = SystemClock()
    sandbox.state.configure(**config)


def stripe_client(sandbox: RunningSandbox, key: str = SANDBOX_ENV["STRIPE_SECRET_KEY"],
                  timeout_s: float | None = None) -> stripe.StripeClient:
    http = None if timeout_s is None else stripe.HTTPXClient(timeout=timeout_s,
                                                             allow_sync_methods=True)
    return stripe.StripeClient(key, base_addresses={"api": sandbox.url + "/pay"},
                               max_network_retries=0, http_client=http)


def slack_client(sandbox: RunningSandbox, token: str | None = SANDBOX_ENV["SLACK_BOT_TOKEN"],
                 timeout_s: int = 30) -> slack_sdk.WebClient:
    return slack_sdk.WebClient(token=token, base_url=sandbox.url + "/chat/api/",
                               timeout=timeout_s)


def githubkit_client(sandbox: RunningSandbox, token: str | None = SANDBOX_ENV["GITHUB_TOKEN"],
                     timeout_s: float | None = None) -> GitHub[Any]:
    return GitHub(token, base_url=sandbox.url + "/gh/", timeout=timeout_s, auto_retry=False,
                  http_cache=False)


def pygithub_client(sandbox: RunningSandbox,
                    token: str = SANDBOX_ENV["GITHUB_TOKEN"]) -> github.Github:
    # No pauses between requests: PyGithub's politeness toward github.com, not its wire format.
    return github.Github(base_url=sandbox.url + "/gh", auth=github.Auth.Token(token), retry=None,
                         seconds_between_requests=None, seconds_between_writes=None)


def postmark_client(sandbox: RunningSandbox,
                    token: str = SANDBOX_ENV["POSTMARK_SERVER_TOKEN"],
                    timeout_s: float | None = None) -> postmarker.core.PostmarkClient:
    return postmarker.core.PostmarkClient(server_token=token, timeout=timeout_s,
                                          root_api_url=sandbox.url)


def twilio_client(sandbox: RunningSandbox, timeout_s: float | None = None) -> twilio.rest.Client:
    client = twilio.rest.Client(ACCOUNT, "sandbox-token", http_client=(
        twilio.http.http_client.TwilioHttpClient(timeout=timeout_s)))
    client.api.base_url = sandbox.url + "/twilio"
    return client


def arm(sandbox: RunningSandbox, root: str, fault: str, on: str = "write") -> None:
    """The next write (or read) under `root` runs under `fault`: an SDK sends no header of
    ours."""
    httpx.post(sandbox.url + "/_sandbox/faults",
               json={"provider": root, "fault": fault, "on": on}).raise_for_status()


def target(**correlation: str) -> ProbeTarget:
    return ProbeTarget(OP, "key-" + OP, "p", "a", HASH, correlation, intent_at=NOW,
                       dispatched_at=NOW)


def observe(recipe: str, base_url: str, found: ProbeTarget, **options: Any) -> Observation:
    """One read by `recipe`, with the sandbox's credentials in its environment."""
    env = {**SANDBOX_ENV, "TWILIO_ACCOUNT_SID": ACCOUNT, "TWILIO_AUTH_TOKEN": "sandbox-token"}
    probe = recipe_factory(recipe)(recipe, {"base_url": base_url, "tries": 1, **options}, env)
    result = probe.probe(found)
    assert isinstance(result, Observation)
    return result
