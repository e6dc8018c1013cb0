"""Slack Events API (POST /v1/webhooks/slack): X-Slack-Signature `v0=<HMAC-SHA256 of
"v0:<timestamp>:<body>">` with X-Slack-Request-Timestamp within five minutes, as
https://docs.slack.dev/authentication/verifying-requests-from-slack/ describes, checked against
slack_sdk's SignatureVerifier too; the url_verification challenge; message_metadata_posted
events as receipts."""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import timedelta

import pytest
from slack_sdk.signature import SignatureVerifier

from sidecar_client import H, Sidecar, assert_problem
from webhook_deliveries import deliver, encoded, event, receipts, sent_again, set_secret, traces

pytestmark = pytest.mark.usefixtures("no_internal_errors")

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
PATH = "/v1/webhooks/slack"


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    set_secret(monkeypatch, "slack", SECRET)


def signed(body: bytes, *, secret: str = SECRET, at: int | None = None) -> dict[str, str]:
    timestamp = str(int(time.time()) if at is None else at)
    digest = hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + body,
                      hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": "v0=" + digest}


def test_a_delivery_signed_as_documented_passes_slack_sdks_verifier() -> None:
    body = encoded(event("slack_message_metadata_posted"))
    assert SignatureVerifier(SECRET).is_valid_request(body, signed(body))
    assert not SignatureVerifier(SECRET).is_valid_request(body, signed(body, secret="other"))


def test_url_verification_is_answered_with_its_challenge(sidecar: Sidecar) -> None:
    body = encoded(event("slack_url_verification"))
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200
    assert response.json() == {"challenge": event("slack_url_verification")["challenge"]}
    assert traces(sidecar.store) == (0, 0)
    assert_problem(deliver(sidecar, PATH, body, signed(body, secret="other")), 401,
                   "webhook-rejected")


def test_signed_message_metadata_posted_records_a_receipt(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "slack")
    body = encoded(event("slack_message_metadata_posted"))
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200, response.text
    assert response.json()["delivery_id"] == "Ev08ABCDEF12"
    assert receipts(sidecar, "op-1") == [("webhook:slack", "1764581000.000200", H)]


@pytest.mark.parametrize("case", ["wrong_secret", "stale", "future", "altered", "no_headers",
                                  "not_a_time"])
def test_a_bad_signature_or_timestamp_gets_401_and_leaves_no_trace(
        sidecar: Sidecar, case: str) -> None:
    sidecar.intent("op-1", "slack")
    body = encoded(event("slack_message_metadata_posted"))
    now = int(time.time())
    headers = {"wrong_secret": signed(body, secret="not-ours"),
               "stale": signed(body, at=now - 310), "future": signed(body, at=now + 310),
               "altered": signed(body.replace(b"op-1", b"op-2")),
               "no_headers": {},
               "not_a_time": {**signed(body), "X-Slack-Request-Timestamp": "yesterday"}}[case]
    before = traces(sidecar.store)
    assert_problem(deliver(sidecar, PATH, body, headers), 401, "webhook-rejected")
    assert traces(sidecar.store) == before


def test_a_retried_event_gets_401_and_is_recorded_once(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "slack")
    body = encoded(event("slack_message_metadata_posted"))
    assert deliver(sidecar, PATH, body, signed(body)).status_code == 200
    after_first = traces(sidecar.store)
    retry = {**signed(body), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
    assert_problem(deliver(sidecar, PATH, body, retry), 401, "webhook-rejected")
    assert traces(sidecar.store) == after_first


def test_an_event_id_is_remembered_for_at_least_three_days(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "slack")
    body = encoded(event("slack_message_metadata_posted"))
    again = sent_again(sidecar, PATH, body, signed, timedelta(days=3, minutes=-1))
    assert_problem(again, 401, "webhook-rejected")
    assert len(receipts(sidecar, "op-1")) == 1


def test_an_event_of_another_type_is_acknowledged_unrecorded(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "slack")
    payload = event("slack_message_metadata_posted")
    payload["event"]["type"] = "message_metadata_deleted"
    body = encoded(payload)
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200 and response.json()["recorded"] is False
    assert receipts(sidecar, "op-1") == []
