"""Twilio status callbacks (POST /v1/webhooks/twilio): form-encoded, `X-Twilio-Signature` the
base64 HMAC-SHA1 of the full URL and the sorted POST parameters under the auth token
(https://www.twilio.com/docs/usage/webhooks/webhooks-security), signed here by the twilio
package's own `RequestValidator.compute_signature`. The operation is named in the
StatusCallback URL the worker set, the message by `MessageSid`. Twilio signs no timestamp, so
there is no stale or future case: a callback is refused again for good instead."""

from __future__ import annotations

from urllib.parse import urlencode

import httpx
import pytest
from twilio.request_validator import RequestValidator

from sidecar_client import H, Sidecar, assert_problem
from webhook_deliveries import receipts, set_secret, traces

pytestmark = pytest.mark.usefixtures("no_internal_errors")

TOKEN = "12345678901234567890123456789012"
SID = "SM1f0e8ae6ade43cb3c0ce4525424e404f"
ROUTE = "/v1/webhooks/twilio"


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    set_secret(monkeypatch, "twilio", TOKEN)


def callback_url(sidecar: Sidecar, op: str = "op-1") -> str:
    """The StatusCallback the worker sets when it creates the message."""
    return sidecar.url + ROUTE + "?" + urlencode({"operation_id": op, "request_hash": H})


def status(message_status: str = "delivered", sid: str = SID) -> dict[str, str]:
    """A message status callback's parameters, as Twilio sends them."""
    return {"SmsSid": sid, "SmsStatus": message_status, "MessageStatus": message_status,
            "To": "+15558675310", "MessageSid": sid,
            "AccountSid": "ACae3f8a2b9c1d4e5f60718293a4b5c6d7", "From": "+15017122661",
            "ApiVersion": "2010-04-01"}


def signed(url: str, params: dict[str, str], token: str = TOKEN) -> dict[str, str]:
    return {"X-Twilio-Signature": RequestValidator(token).compute_signature(url, params)}


def post(url: str, params: dict[str, str], headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url, content=urlencode(params).encode(), timeout=30, headers={
        "Content-Type": "application/x-www-form-urlencoded", **headers})


def test_a_signed_sent_callback_records_a_receipt_bound_to_the_request(
        sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "twilio")
    url, params = callback_url(sidecar), status()
    response = post(url, params, signed(url, params))
    assert response.status_code == 200, response.text
    assert response.json()["recorded"] is True
    assert receipts(sidecar, "op-1") == [("webhook:twilio", SID, H)]
    assert sidecar.get("/v1/operations/op-1")["verdict"] == "verified_applied"


@pytest.mark.parametrize("message_status", ["sent", "undelivered", "partially_delivered"])
def test_every_status_that_says_the_message_left_twilio_is_a_receipt(
        sidecar: Sidecar, message_status: str) -> None:
    sidecar.intent("op-1", "twilio")
    url, params = callback_url(sidecar), status(message_status)
    assert post(url, params, signed(url, params)).json()["recorded"] is True


@pytest.mark.parametrize("message_status", ["failed", "canceled"])
def test_a_failed_or_canceled_message_is_acknowledged_but_no_receipt(
        sidecar: Sidecar, message_status: str) -> None:
    sidecar.intent("op-1", "twilio")
    url, params = callback_url(sidecar), status(message_status)
    response = post(url, params, signed(url, params))
    assert response.status_code == 200 and response.json()["recorded"] is False
    assert receipts(sidecar, "op-1") == []


@pytest.mark.parametrize("case", ["forged", "altered", "other_url", "no_header", "not_a_form"])
def test_a_bad_signature_gets_401_and_leaves_no_trace(sidecar: Sidecar, case: str) -> None:
    sidecar.intent("op-1", "twilio")
    url, params = callback_url(sidecar), status()
    headers = {"forged": signed(url, params, token="0" * 32),
               "altered": signed(url, {**params, "MessageStatus": "failed"}),
               # The signature covers the URL: a callback for op-2 cannot be pointed at op-1.
               "other_url": signed(callback_url(sidecar, "op-2"), params),
               "no_header": {}, "not_a_form": signed(url, params)}[case]
    before = traces(sidecar.store)
    if case == "not_a_form":
        response = httpx.post(url, content=b"\xff\xfe", timeout=30, headers={
            "Content-Type": "application/x-www-form-urlencoded", **headers})
    else:
        response = post(url, params, headers)
    assert_problem(response, 401, "webhook-rejected")
    assert traces(sidecar.store) == before


def test_a_replayed_callback_gets_401_and_is_recorded_once(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "twilio")
    url, params = callback_url(sidecar), status()
    assert post(url, params, signed(url, params)).status_code == 200
    after_first = traces(sidecar.store)
    assert_problem(post(url, params, signed(url, params)), 401, "webhook-rejected")
    assert traces(sidecar.store) == after_first
    # The message's next status is a callback of its own, and names the same message.
    delivered_later = status("read")
    assert post(url, delivered_later, signed(url, delivered_later)).status_code == 200
    assert [ref for _, ref, _ in receipts(sidecar, "op-1")] == [SID, SID]


def test_a_callback_for_another_message_than_the_attempt_recorded_is_not_a_receipt(
        sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "twilio")
    sidecar.post("/v1/operations/op-1/attempts", {
        "attempt": 1, "idempotency_key": "key-op-1", "request_hash": H, "outcome": "response",
        "status": 201, "receipt": {"provider_ref": SID, "request_hash": H}}, 201)
    other = "SM" + "9" * 32
    url, params = callback_url(sidecar), status(sid=other)
    response = post(url, params, signed(url, params))
    assert response.status_code == 200 and response.json()["recorded"] is False
    assert f"message {other} is not the one operation 'op-1' recorded" in \
        response.json()["detail"]
    assert [ref for _, ref, _ in receipts(sidecar, "op-1")] == []


def test_the_public_url_behind_a_proxy_is_the_one_checked(
        sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch) -> None:
    public = "https://sidecar.example.com" + ROUTE
    monkeypatch.setenv("RECONCILER_WEBHOOK_TWILIO_URL", public)
    sidecar.intent("op-1", "twilio")
    query = "?" + urlencode({"operation_id": "op-1", "request_hash": H})
    params = status()
    as_twilio_saw_it = signed(public + query, params)
    assert post(callback_url(sidecar), params, as_twilio_saw_it).status_code == 200
    assert_problem(post(callback_url(sidecar), status("read"),
                        signed(callback_url(sidecar), status("read"))), 401,
                   "webhook-rejected")


def test_without_an_operation_in_the_callback_url_nothing_is_recorded(
        sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "twilio")
    url, params = sidecar.url + ROUTE, status()
    response = post(url, params, signed(url, params))
    assert response.status_code == 200 and response.json()["recorded"] is False
    assert "StatusCallback=<this route>?operation_id=<id>" in response.json()["detail"]
