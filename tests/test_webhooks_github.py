"""GitHub webhooks (POST /v1/webhooks/github): X-Hub-Signature-256 over the body, as
https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries describes (its
published test vector included). No timestamp is signed: a replay is refused by its
X-GitHub-Delivery id."""

from __future__ import annotations

import hashlib
import hmac
import uuid

import pytest

from reconciler.service.webhooks.github import signature

from sidecar_client import H, Sidecar, assert_problem
from webhook_deliveries import deliver, encoded, event, receipts, set_secret, traces

pytestmark = pytest.mark.usefixtures("no_internal_errors")

SECRET = "gh-webhook-secret-for-tests"
PATH = "/v1/webhooks/github"


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    set_secret(monkeypatch, "github", SECRET)


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
    ("issues", {"issue": {"number": 43, "body": "no marker here"}})])
def test_other_events_and_unmarked_issues_are_acknowledged_unrecorded(
        sidecar: Sidecar, kind: str, change: dict[str, object]) -> None:
    sidecar.intent("op-1", "github")
    body = encoded({**event("github_issues_opened"), **change})
    response = deliver(sidecar, PATH, body, signed(body, kind=kind))
    assert response.status_code == 200
    assert response.json()["recorded"] is False
    assert receipts(sidecar, "op-1") == []
