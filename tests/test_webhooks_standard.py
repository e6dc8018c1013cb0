"""Standard Webhooks (POST /v1/webhooks/standard/{provider}): webhook-id, webhook-timestamp and
webhook-signature `v1,<base64 HMAC-SHA256 of "id.timestamp.body">` under a `whsec_` secret, as
the spec (github.com/standard-webhooks/standard-webhooks, spec/standard-webhooks.md) describes,
checked against the `standardwebhooks` package's verifier too."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from datetime import timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from sidecar_client import H, Sidecar, assert_problem
from webhook_deliveries import deliver, encoded, event, receipts, sent_again, traces

pytestmark = pytest.mark.usefixtures("no_internal_errors")

KEY = b"standard-webhooks-test-key-32byt"
SECRET = "whsec_" + base64.b64encode(KEY).decode()
PATH = "/v1/webhooks/standard/pay"


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONCILER_WEBHOOK_SECRET_STANDARD_PAY", SECRET)


#: Standard Webhooks' own header names, and those of senders that deliver through Svix (Clerk,
#: Resend): https://docs.svix.com/receiving/verifying-payloads/how-manual
FAMILIES = ["webhook", "svix"]


def signed(body: bytes, *, key: bytes = KEY, msg_id: str = "msg_2Lk0zvQ8rT",
           at: int | None = None, family: str = "webhook") -> dict[str, str]:
    timestamp = str(int(time.time()) if at is None else at)
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return {f"{family}-id": msg_id, f"{family}-timestamp": timestamp,
            f"{family}-signature": "v1," + base64.b64encode(mac).decode()}


def test_a_delivery_signed_as_the_spec_says_passes_the_reference_verifier() -> None:
    body = encoded(event("standard_payment_succeeded"))
    assert Webhook(SECRET).verify(body, signed(body))["type"] == "payment.succeeded"
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(body, signed(body, key=b"another-key"))


@pytest.mark.parametrize("family", FAMILIES)
def test_signed_delivery_records_a_receipt_for_the_paths_provider(
        sidecar: Sidecar, family: str) -> None:
    sidecar.intent("op-1", "pay")
    body = encoded(event("standard_payment_succeeded"))
    response = deliver(sidecar, PATH, body, signed(body, family=family))
    assert response.status_code == 200, response.text
    assert receipts(sidecar, "op-1") == [("webhook:pay", "pay_01JDKQ3W6X9Y", H)]
    assert sidecar.get("/v1/operations/op-1")["verdict"] == "verified_applied"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", ["forged", "stale", "future", "altered", "no_headers",
                                  "garbled"])
def test_a_bad_signature_or_timestamp_gets_401_and_leaves_no_trace(
        sidecar: Sidecar, case: str, family: str) -> None:
    sidecar.intent("op-1", "pay")
    body = encoded(event("standard_payment_succeeded"))
    now = int(time.time())
    headers = {"forged": signed(body, key=b"not-ours", family=family),
               "stale": signed(body, at=now - 310, family=family),
               "future": signed(body, at=now + 310, family=family),
               "altered": signed(body.replace(b"op-1", b"op-2"), family=family),
               "no_headers": {},
               "garbled": {**signed(body, family=family), f"{family}-signature": "v1"}}[case]
    before = traces(sidecar.store)
    assert_problem(deliver(sidecar, PATH, body, headers), 401, "webhook-rejected")
    assert traces(sidecar.store) == before


@pytest.mark.parametrize(("first", "then"), [(a, b) for a in FAMILIES for b in FAMILIES])
def test_a_replayed_message_id_gets_401_and_is_recorded_once_under_either_header_family(
        sidecar: Sidecar, first: str, then: str) -> None:
    sidecar.intent("op-1", "pay")
    body = encoded(event("standard_payment_succeeded"))
    assert deliver(sidecar, PATH, body, signed(body, family=first)).status_code == 200
    after_first = traces(sidecar.store)
    assert_problem(deliver(sidecar, PATH, body, signed(body, family=then)), 401,
                   "webhook-rejected")
    assert traces(sidecar.store) == after_first


def test_a_delivery_mixing_the_two_header_families_gets_401(sidecar: Sidecar) -> None:
    """Read as one family whole: a `webhook-id` beside `svix-*` timestamp and signature is a
    delivery with no `webhook-timestamp`/`webhook-signature`, never a pick of the two."""
    sidecar.intent("op-1", "pay")
    body = encoded(event("standard_payment_succeeded"))
    svix = signed(body, family="svix")
    mixed = {"webhook-id": svix["svix-id"], "svix-timestamp": svix["svix-timestamp"],
             "svix-signature": svix["svix-signature"]}
    assert_problem(deliver(sidecar, PATH, body, mixed), 401, "webhook-rejected")
    assert receipts(sidecar, "op-1") == []


def test_a_message_id_is_remembered_past_the_specs_example_retry_schedule(
        sidecar: Sidecar) -> None:
    """The spec's example schedule retries until 75 h 35 min after the first attempt, each
    retry signed afresh under the same webhook-id."""
    sidecar.intent("op-1", "pay")
    body = encoded(event("standard_payment_succeeded"))
    again = sent_again(sidecar, PATH, body, signed, timedelta(hours=76))
    assert_problem(again, 401, "webhook-rejected")
    assert len(receipts(sidecar, "op-1")) == 1


def test_a_delivery_to_another_providers_path_is_not_recorded(
        sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONCILER_WEBHOOK_SECRET_STANDARD_FRAGILE", SECRET)
    sidecar.intent("op-1", "pay")
    body = encoded(event("standard_payment_succeeded"))
    response = deliver(sidecar, "/v1/webhooks/standard/fragile", body, signed(body))
    assert response.status_code == 200 and response.json()["recorded"] is False
    assert receipts(sidecar, "op-1") == []


def test_a_secret_that_is_not_whsec_base64_gets_404(
        sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONCILER_WEBHOOK_SECRET_STANDARD_PAY", "whsec_***")
    body = encoded(event("standard_payment_succeeded"))
    assert_problem(deliver(sidecar, PATH, body, signed(body)), 404, "webhook-not-configured")
