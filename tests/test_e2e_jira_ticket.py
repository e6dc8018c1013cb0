"""End to end over HTTP, sidecar and sandbox on loopback: a Jira issue the sandbox created
while the `jira` SDK timed out is reconciled to exactly one issue, counted at the sandbox.

    intent ── create (answer held past the SDK's timeout, issue committed) ── attempt: timeout
      ── /reconcile: the JQL search finds the labelled issue ── verified_applied
      ── /retry: refused (Jira has no idempotency key: a second create is a second issue)

And the search's lag: while the index has not caught up, the search's zero is a lagging one,
which proves nothing inside the visibility window (SPEC section 3): indeterminate, no retry;
once the index shows the issue, verified_applied.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import requests
from jira import JIRA

from probes.recipes.jira import LABEL
from reconciler.core.hashing import request_hash
from reconciler.sandbox import RunningSandbox
from reconciler.sandbox.jira import account_id

from sandbox_harness import wait_until
from service_harness import answered, configured_sidecar

EMAIL, TOKEN = "agent@example.test", "sandbox-api-token"
#: The sandbox index lags this long in the lag case; the provider's window is configured longer.
LAG_S, VISIBILITY_LAG_S = 1.0, 1.5
SDK_TIMEOUT_S = 0.5
#: In the late-commit case the sandbox commits this long after the call, past the SDK's timeout
#: and inside the contract's settle time.
DELAY_S, INFLIGHT_S = 1.0, 1.5

CONFIG = """
[providers.jira]
max_attempts = 3
reconcile_deadline_s = 600
inflight_s = {inflight}
visibility_lag_s = {lag}

[[providers.jira.probes]]
use = "jira.search"
actions = ["issue.create"]
base_url = "{url}/jira"
account = "{account}"
least_lag_s = 0                  # the sandbox's lag is the test's, not Jira's minutes
tries = 1
"""


@pytest.fixture
def provider(sandbox: RunningSandbox, monkeypatch: pytest.MonkeyPatch) -> RunningSandbox:
    """The module's sandbox emptied, on real time; the probe's credentials in the environment."""
    sandbox.state.reset()
    sandbox.state.configure(hold_s=2.0)
    monkeypatch.setenv("JIRA_EMAIL", EMAIL)
    monkeypatch.setenv("JIRA_API_TOKEN", TOKEN)
    return sandbox


@pytest.fixture
def sidecar(tmp_path: Path, provider: RunningSandbox) -> Iterator[httpx.Client]:
    with configured_sidecar(CONFIG.format(url=provider.url, account=account_id(EMAIL),
                                          lag=VISIBILITY_LAG_S, inflight=INFLIGHT_S),
                            tmp_path) as http:
        yield http


def create_lost(sidecar: httpx.Client, sandbox: RunningSandbox, op: str,
                fault: str = "lose_response") -> str:
    """The worker's one create: intent first, then the SDK call whose answer never comes (by
    default the sandbox commits the issue and holds the answer), then the attempt it saw: a
    timeout."""
    params = {"project": "OPS", "summary": "Flaky deploy", "operation_id": op}
    hash_ = request_hash(params)
    answered(sidecar.post("/v1/operations", json={
        "operation_id": op, "request_hash": hash_, "provider": "jira",
        "action": "issue.create", "effect": "non_idempotent", "correlation": {"project": "OPS"},
        # The label is how the search finds the issue (docs/providers/jira.md).
        "carries": ["operation_id"]}), 201)
    client = JIRA(server=sandbox.url + "/jira", basic_auth=(EMAIL, TOKEN), max_retries=0,
                  timeout=SDK_TIMEOUT_S)
    sandbox.state.arm("jira", fault)
    with pytest.raises(requests.exceptions.ReadTimeout):
        client.create_issue(fields={
            "project": {"key": "OPS"}, "issuetype": {"name": "Task"}, "summary": "Flaky deploy",
            "labels": [LABEL.format(operation_id=op)]}, prefetch=False)
    answered(sidecar.post(f"/v1/operations/{op}/attempts", json={
        "attempt": 1, "request_hash": hash_, "outcome": "timeout"}), 201)
    return hash_


def issues(sandbox: RunningSandbox) -> list[str]:
    return [r.ref for r in sandbox.state.objects() if r.provider == "jira"]


def test_a_timed_out_create_the_sandbox_applied_is_one_issue_and_no_retry(
        sidecar: httpx.Client, provider: RunningSandbox) -> None:
    op = "run-j.call-1"
    hash_ = create_lost(sidecar, provider, op)

    verdict = answered(sidecar.post(f"/v1/operations/{op}/reconcile"))
    retry = answered(sidecar.post(f"/v1/operations/{op}/retry", json={
        "request_hash": hash_, "holder": "worker-1"}))

    [issue] = issues(provider)
    assert verdict["verdict"] == "verified_applied", verdict
    assert [e["matches"] for e in verdict["evidence"] if e["matches"]][-1][0][
        "provider_ref"] == issue
    assert (retry["allowed"], retry["verdict"]) == (False, "verified_applied")


def test_inside_the_search_lag_the_zero_proves_nothing_and_no_retry_is_granted(
        sidecar: httpx.Client, provider: RunningSandbox) -> None:
    provider.state.configure(search_lag_s=LAG_S)
    op = "run-j.call-2"
    hash_ = create_lost(sidecar, provider, op)

    early = answered(sidecar.post(f"/v1/operations/{op}/reconcile"))
    refused = answered(sidecar.post(f"/v1/operations/{op}/retry", json={
        "request_hash": hash_, "holder": "worker-1"}))
    assert early["verdict"] == "indeterminate" and not refused["allowed"], early
    assert "zero_not_conclusive" in early["findings"]

    provider.state.configure(search_lag_s=0)   # the index caught up
    late = answered(sidecar.post(f"/v1/operations/{op}/reconcile"))
    assert late["verdict"] == "verified_applied", late
    assert len(issues(provider)) == 1


def test_a_create_still_in_flight_when_the_sdk_gave_up_is_found_once_it_lands(
        sidecar: httpx.Client, provider: RunningSandbox) -> None:
    # The field trial's failure on a provider without keys: a zero read while the provider is
    # still applying the request must not open a second create.
    op = "run-j.call-3"
    hash_ = create_lost(sidecar, provider, op, fault=f"delay={DELAY_S}")

    early = answered(sidecar.post(f"/v1/operations/{op}/reconcile"))
    refused = answered(sidecar.post(f"/v1/operations/{op}/retry", json={
        "request_hash": hash_, "holder": "worker-1"}))
    assert not refused["allowed"], refused
    if not any(e["matches"] for e in early["evidence"]):  # read before the sandbox committed
        assert early["verdict"] == "indeterminate", early
        assert "zero_not_conclusive" in early["findings"]

    wait_until(lambda: len(issues(provider)) == 1)
    landed = answered(sidecar.post(f"/v1/operations/{op}/reconcile"))
    assert landed["verdict"] == "verified_applied", landed
    assert len(issues(provider)) == 1
