"""GitHub webhooks (POST /v1/webhooks/github): X-Hub-Signature-256 over the body, as
https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries describes (its
published test vector included). An issue is a receipt only when the configured repository and
the worker's own account wrote it (anyone can open an issue). No timestamp or delivery id is
signed: a delivery is known again by its body, whatever X-GitHub-Delivery says."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import timedelta
from typing import Any

import pytest

from reconciler.service.webhooks.github import signature

from sidecar_client import H, Sidecar, assert_problem
from webhook_deliveries import deliver, encoded, event, receipts, sent_again, set_secret, traces

pytestmark = pytest.mark.usefixtures("no_internal_errors")

SECRET = "gh-webhook-secret-for-tests"
PATH = "/v1/webhooks/github"
#: Where the worker opens its issues, and as whom (tests/data/webhooks/github_issues_opened.json).
REPOSITORY, ACCOUNT = "acme/ops", "ops-bot[bot]"


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    set_secret(monkeypatch, "github", SECRET)
    monkeypatch.setenv("RECONCILER_WEBHOOK_GITHUB_REPOSITORY", REPOSITORY)
    monkeypatch.setenv("RECONCILER_WEBHOOK_GITHUB_ACCOUNT", ACCOUNT)


def issue_opened(**issue: Any) -> dict[str, Any]:
    """The opened-issue event, its issue changed by `issue` (user, body, ...)."""
    opened = event("github_issues_opened")
    return {**opened, "issue": {**opened["issue"], **issue}}


def signed(body: bytes, *, secret: str = SECRET, kind: str = "issues",
           delivery: str | None = None) -> dict[str, str]:
    """The headers GitHub sends, the signature computed as its docs show."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": "sha256=" + digest, "X-GitHub-Event": kind,
            "X-GitHub-Delivery": delivery or str(uuid.uuid4())}


def test_signature_matches_githubs_published_test_vector() -> None:
    assert signature("It's a Secret to Everybody", b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")


def test_signed_issue_opened_with_the_marker_records_a_receipt(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "github")
    body = encoded(event("github_issues_opened"))
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200, response.text
    assert response.json()["recorded"] is True
    assert receipts(sidecar, "op-1") == [("webhook:github", "42", H)]


@pytest.mark.parametrize("case", ["wrong_secret", "tampered_body", "sha1_only"])
def test_a_bad_signature_gets_401_and_leaves_no_trace(sidecar: Sidecar, case: str) -> None:
    sidecar.intent("op-1", "github")
    body = encoded(event("github_issues_opened"))
    headers = {"wrong_secret": signed(body, secret="not-ours"),
               "tampered_body": signed(body.replace(b"98%", b"99%")),
               "sha1_only": {"X-Hub-Signature": "sha1=" + hmac.new(
                   SECRET.encode(), body, hashlib.sha1).hexdigest(), "X-GitHub-Event": "issues",
                   "X-GitHub-Delivery": str(uuid.uuid4())}}[case]
    before = traces(sidecar.store)
    assert_problem(deliver(sidecar, PATH, body, headers), 401, "webhook-rejected")
    assert traces(sidecar.store) == before


def test_a_redelivery_gets_401_and_is_recorded_once(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "github")
    body = encoded(event("github_issues_opened"))
    headers = signed(body, delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
    assert deliver(sidecar, PATH, body, headers).status_code == 200
    after_first = traces(sidecar.store)
    assert_problem(deliver(sidecar, PATH, body, headers), 401, "webhook-rejected")
    assert traces(sidecar.store) == after_first
    assert len(receipts(sidecar, "op-1")) == 1


@pytest.mark.parametrize(("kind", "change"), [
    ("issues", {"action": "edited"}), ("issue_comment", {}), ("ping", {"zen": "Keep it simple."}),
    ("issues", {"issue": issue_opened(number=43, body="no marker here")["issue"]})])
def test_other_events_and_unmarked_issues_are_acknowledged_unrecorded(
        sidecar: Sidecar, kind: str, change: dict[str, object]) -> None:
    sidecar.intent("op-1", "github")
    body = encoded({**event("github_issues_opened"), **change})
    response = deliver(sidecar, PATH, body, signed(body, kind=kind))
    assert response.status_code == 200
    assert response.json()["recorded"] is False
    assert receipts(sidecar, "op-1") == []


def test_a_copy_re_sent_under_a_new_delivery_id_is_a_replay(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "github")
    body = encoded(event("github_issues_opened"))
    assert deliver(sidecar, PATH, body, signed(body, delivery=str(uuid.uuid4()))).json()[
        "recorded"] is True
    after_first = traces(sidecar.store)
    # X-GitHub-Delivery is not signed: anyone holding one delivery can send it under a new id.
    assert_problem(deliver(sidecar, PATH, body, signed(body, delivery=str(uuid.uuid4()))),
                   401, "webhook-rejected")
    assert traces(sidecar.store) == after_first


def test_a_delivery_is_refused_again_however_long_ago_it_came(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "github")
    body = encoded(event("github_issues_opened"))
    again = sent_again(sidecar, PATH, body, signed, timedelta(days=365))
    assert_problem(again, 401, "webhook-rejected")
    assert len(receipts(sidecar, "op-1")) == 1


@pytest.mark.parametrize(("change", "why"), [
    ({"repository": {"id": 1, "name": "ops", "full_name": "mallory/ops", "private": False}},
     "in repository 'mallory/ops'"),
    ({"issue": issue_opened(user={"login": "mallory", "id": 666, "type": "User"})["issue"]},
     "opened by 'mallory'")])
def test_an_issue_anyone_else_wrote_carrying_the_marker_is_no_receipt(
        sidecar: Sidecar, change: dict[str, Any], why: str) -> None:
    sidecar.intent("op-1", "github")
    sidecar.attempt("op-1")
    body = encoded({**event("github_issues_opened"), **change})
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200, response.text
    assert response.json()["recorded"] is False
    assert response.json()["detail"].startswith("ignored: ") and why in response.json()["detail"]
    assert receipts(sidecar, "op-1") == []
    assert sidecar.get("/v1/operations/op-1")["verdict"] != "verified_applied"
    assert traces(sidecar.store) == (1, 0)  # acknowledged, so GitHub does not redeliver it


@pytest.mark.parametrize("unset", ["RECONCILER_WEBHOOK_GITHUB_REPOSITORY",
                                   "RECONCILER_WEBHOOK_GITHUB_ACCOUNT"])
def test_without_a_configured_repository_and_account_no_issue_is_a_receipt(
        sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch, unset: str) -> None:
    monkeypatch.delenv(unset)
    sidecar.intent("op-1", "github")
    body = encoded(event("github_issues_opened"))
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200
    assert response.json()["recorded"] is False and unset in response.json()["detail"]
    assert receipts(sidecar, "op-1") == []


def test_the_repository_and_account_match_without_regard_to_case(
        sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONCILER_WEBHOOK_GITHUB_REPOSITORY", "octo/other, ACME/Ops")
    monkeypatch.setenv("RECONCILER_WEBHOOK_GITHUB_ACCOUNT", "Ops-Bot[bot]")
    sidecar.intent("op-1", "github")
    body = encoded(event("github_issues_opened"))
    assert deliver(sidecar, PATH, body, signed(body)).json()["recorded"] is True
    assert receipts(sidecar, "op-1") == [("webhook:github", "42", H)]
