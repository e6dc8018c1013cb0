"""Jira Cloud webhooks (POST /v1/webhooks/jira): an admin webhook with a secret signs the body
with `X-Hub-Signature: sha256=<hex>`, as
https://developer.atlassian.com/cloud/jira/platform/webhooks/#secure-admin-webhooks describes.
A created issue is a receipt only when the worker's own account created it (anyone may label an
issue). No timestamp or delivery id is signed: a delivery is known again by its body, whatever
X-Atlassian-Webhook-Identifier says, and a captured one verifies forever (no stale or future
case to test: Jira signs no time)."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import timedelta
from typing import Any

import pytest

from sidecar_client import Sidecar, assert_problem
from webhook_deliveries import deliver, encoded, event, receipts, sent_again, set_secret, traces

pytestmark = pytest.mark.usefixtures("no_internal_errors")

SECRET = "jira-webhook-secret-for-tests"
PATH = "/v1/webhooks/jira"
#: Who creates the worker's issues (tests/data/webhooks/jira_issue_created.json).
ACCOUNT = "712020:2c7d1f0e-5a1b-4f5e-9a37-0c1d2e3f4a5b"


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    set_secret(monkeypatch, "jira", SECRET)
    monkeypatch.setenv("RECONCILER_WEBHOOK_JIRA_ACCOUNT", ACCOUNT)


def issue_created(**fields: Any) -> dict[str, Any]:
    """The issue-created event, its issue's fields changed by `fields`."""
    created = event("jira_issue_created")
    issue = created["issue"]
    return {**created, "issue": {**issue, "fields": {**issue["fields"], **fields}}}


def signed(body: bytes, *, secret: str = SECRET, identifier: str | None = None
           ) -> dict[str, str]:
    """The headers Jira sends, the signature computed as its docs describe."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature": "sha256=" + digest,
            "X-Atlassian-Webhook-Identifier": identifier or str(uuid.uuid4())}


def test_a_signed_issue_created_with_the_label_records_a_receipt(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "jira")
    body = encoded(event("jira_issue_created"))
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200, response.text
    assert response.json()["recorded"] is True
    assert receipts(sidecar, "op-1") == [("webhook:jira", "OPS-42", None)]


@pytest.mark.parametrize("case", ["wrong_secret", "altered_body", "unsigned", "sha1"])
def test_a_forged_or_altered_delivery_gets_401_and_leaves_no_trace(sidecar: Sidecar,
                                                                    case: str) -> None:
    sidecar.intent("op-1", "jira")
    body = encoded(event("jira_issue_created"))
    # The altered body goes out under the signature of the body Jira sent.
    sent, headers = {"wrong_secret": (body, signed(body, secret="not-ours")),
                     "altered_body": (body.replace(b"db-2", b"db-3"), signed(body)),
                     "unsigned": (body, {"X-Atlassian-Webhook-Identifier": str(uuid.uuid4())}),
                     "sha1": (body, {"X-Hub-Signature": "sha1=" + hmac.new(
                         SECRET.encode(), body, hashlib.sha1).hexdigest()})}[case]
    before = traces(sidecar.store)
    assert_problem(deliver(sidecar, PATH, sent, headers), 401, "webhook-rejected")
    assert traces(sidecar.store) == before


def test_a_replay_under_a_new_identifier_gets_401_and_is_recorded_once(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "jira")
    body = encoded(event("jira_issue_created"))
    assert deliver(sidecar, PATH, body, signed(body)).json()["recorded"] is True
    after_first = traces(sidecar.store)
    # X-Atlassian-Webhook-Identifier is outside the signature: anyone holding one delivery can
    # send it under a new one.
    assert_problem(deliver(sidecar, PATH, body, signed(body)), 401, "webhook-rejected")
    assert traces(sidecar.store) == after_first
    assert len(receipts(sidecar, "op-1")) == 1


def test_a_delivery_is_refused_again_however_long_ago_it_came(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "jira")
    body = encoded(event("jira_issue_created"))
    assert_problem(sent_again(sidecar, PATH, body, signed, timedelta(days=365)), 401,
                   "webhook-rejected")
    assert len(receipts(sidecar, "op-1")) == 1


@pytest.mark.parametrize("change", [
    {"webhookEvent": "jira:issue_updated"}, {"webhookEvent": "comment_created"},
    {"issue": issue_created(labels=["disk"])["issue"]},
    {"issue": issue_created(labels=["reconciler-op-op-1", "reconciler-op-op-2"])["issue"]}])
def test_other_events_and_unlabelled_issues_are_acknowledged_unrecorded(
        sidecar: Sidecar, change: dict[str, Any]) -> None:
    sidecar.intent("op-1", "jira")
    body = encoded({**event("jira_issue_created"), **change})
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200, response.text
    assert response.json()["recorded"] is False
    assert receipts(sidecar, "op-1") == []


def test_an_issue_someone_else_created_with_the_label_is_no_receipt(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "jira")
    sidecar.attempt("op-1")
    mallory = {"accountId": "712020:mallory", "displayName": "mallory"}
    body = encoded({**event("jira_issue_created"), "issue": issue_created(
        creator=mallory)["issue"]})
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200, response.text
    assert response.json()["detail"].startswith("ignored: ")
    assert "created by '712020:mallory'" in response.json()["detail"]
    assert receipts(sidecar, "op-1") == []
    assert sidecar.get("/v1/operations/op-1")["verdict"] != "verified_applied"


def test_without_the_workers_account_no_issue_is_a_receipt(
        sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECONCILER_WEBHOOK_JIRA_ACCOUNT")
    sidecar.intent("op-1", "jira")
    body = encoded(event("jira_issue_created"))
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200
    assert response.json()["recorded"] is False
    assert "RECONCILER_WEBHOOK_JIRA_ACCOUNT" in response.json()["detail"]


def test_without_a_secret_the_route_is_not_set_up(sidecar: Sidecar,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECONCILER_WEBHOOK_SECRET_JIRA")
    body = encoded(event("jira_issue_created"))
    assert_problem(deliver(sidecar, PATH, body, signed(body)), 404, "webhook-not-configured")
