"""Postmark webhooks (POST /v1/webhooks/postmark). Postmark signs nothing; it documents HTTP Basic
credentials in the webhook URL and its published IPs for firewalls
(https://postmarkapp.com/developer/webhooks/webhooks-overview#protecting-your-webhook). So the
route takes Basic credentials, optionally an IP allow-list, and knows a replay by the body's
hash (Postmark sends no delivery id)."""

from __future__ import annotations

import base64

import pytest

from sidecar_client import H, Sidecar, assert_problem
from webhook_deliveries import deliver, encoded, event, receipts, set_secret, traces

pytestmark = pytest.mark.usefixtures("no_internal_errors")

CREDENTIALS = "postmark:9c1b7d3e5f"
PATH = "/v1/webhooks/postmark"
MESSAGE_ID = "883953f4-6105-42a2-a16a-77a8eac79483"


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    set_secret(monkeypatch, "postmark", CREDENTIALS)


def basic(credentials: str = CREDENTIALS) -> dict[str, str]:
    """What Postmark sends for a webhook URL https://<user>:<password>@host/... (RFC 7617)."""
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


@pytest.mark.parametrize(("record", "bound"), [("postmark_delivery", H),
                                               ("postmark_bounce", None)])
def test_a_delivery_or_bounce_with_the_credentials_records_a_receipt(
        sidecar: Sidecar, record: str, bound: str | None) -> None:
    sidecar.intent("op-1", "postmark")
    body = encoded(event(record))
    response = deliver(sidecar, PATH, body, basic())
    assert response.status_code == 200, response.text
    assert response.json()["delivery_id"].startswith("sha256:")
    assert receipts(sidecar, "op-1") == [("webhook:postmark", MESSAGE_ID, bound)]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Basic !!!"},
                                     {"Authorization": "Bearer " + CREDENTIALS}],
                         ids=["none", "garbled", "not_basic"])
def test_missing_or_wrong_credentials_get_401_and_leave_no_trace(
        sidecar: Sidecar, headers: dict[str, str]) -> None:
    sidecar.intent("op-1", "postmark")
    body = encoded(event("postmark_delivery"))
    before = traces(sidecar.store)
    assert_problem(deliver(sidecar, PATH, body, headers), 401, "webhook-rejected")
    assert_problem(deliver(sidecar, PATH, body, basic("postmark:guess")), 401,
                   "webhook-rejected")
    assert traces(sidecar.store) == before


def test_a_repeated_body_gets_401_and_is_recorded_once(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "postmark")
    body = encoded(event("postmark_delivery"))
    assert deliver(sidecar, PATH, body, basic()).status_code == 200
    after_first = traces(sidecar.store)
    assert_problem(deliver(sidecar, PATH, body, basic()), 401, "webhook-rejected")
    assert traces(sidecar.store) == after_first


@pytest.mark.parametrize(("allowed", "status"), [("127.0.0.0/8", 200),
                                                 ("3.134.147.250/32, 50.31.156.6/32", 401)])
def test_the_ip_allow_list_admits_only_listed_peers(
        sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch, allowed: str, status: int) -> None:
    monkeypatch.setenv("RECONCILER_WEBHOOK_POSTMARK_ALLOWED_IPS", allowed)
    sidecar.intent("op-1", "postmark")
    body = encoded(event("postmark_delivery"))
    assert deliver(sidecar, PATH, body, basic()).status_code == status
    assert len(receipts(sidecar, "op-1")) == (status == 200)


def test_an_open_record_of_a_message_without_metadata_is_acknowledged_unrecorded(
        sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "postmark")
    payload = {**event("postmark_delivery"), "RecordType": "Open"}
    del payload["Metadata"]
    response = deliver(sidecar, PATH, encoded(payload), basic())
    assert response.status_code == 200
    assert response.json() == {"delivery_id": response.json()["delivery_id"],
                               "operation_id": None, "recorded": False,
                               "detail": "the event carries no operation_id in its metadata"}
