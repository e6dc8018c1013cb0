"""Stripe webhooks (POST /v1/webhooks/stripe): Stripe-Signature `t=<unix>,v1=<HMAC-SHA256 of
"t.body">` as https://docs.stripe.com/webhooks#verify-manually describes, checked against the
`stripe` SDK's own verifier too. Good signature: a receipt; bad, stale or replayed: 401 and no
trace."""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime, timedelta

import pytest
import stripe

from reconciler.ledger import Ledger
from reconciler.ledger.prune import prune

from sidecar_client import H, Sidecar, assert_problem
from webhook_deliveries import deliver, encoded, event, receipts, sent_again, set_secret, traces

pytestmark = pytest.mark.usefixtures("no_internal_errors")

SECRET = "whsec_test_5f1d0c7e9b2a4e8c"
PATH = "/v1/webhooks/stripe"


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    set_secret(monkeypatch, "stripe", SECRET)


def signed(body: bytes, *, secret: str = SECRET, at: int | None = None) -> dict[str, str]:
    """The Stripe-Signature header, computed as Stripe documents it."""
    t = int(time.time()) if at is None else at
    v1 = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return {"Stripe-Signature": f"t={t},v1={v1}"}


def test_a_delivery_signed_as_documented_passes_the_stripe_sdk() -> None:
    body = encoded(event("stripe_payment_intent_succeeded"))
    header = signed(body)["Stripe-Signature"]
    constructed = stripe.Webhook.construct_event(body, header, SECRET, tolerance=300)
    assert constructed["type"] == "payment_intent.succeeded"
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(body, signed(body, secret="whsec_other")
                                       ["Stripe-Signature"], SECRET)


def test_a_genuine_delivery_verifies_on_stripe_10_to_15_which_format_the_payload_as_text(
        sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch) -> None:
    """stripe 10 to 15 sign `"%d.%s" % (t, payload)` without decoding, so a bytes payload is
    checked as "b'...'"; stripe>=10 allows them. Checked for real with 10.12.0 and 15.0.1 on
    PYTHONPATH (docs/webhooks.md); here the shared venv's stripe is made to format as they do."""
    verify = stripe.WebhookSignature.verify_header

    def as_stripe_15(payload: str | bytes, header: str | None, secret: str | None,
                     tolerance: int | None = None) -> object:
        # Bytes become the text "b'...'", as "%d.%s" made them there.
        return verify(payload if isinstance(payload, str) else repr(payload), header, secret,
                      tolerance)

    monkeypatch.setattr(stripe.WebhookSignature, "verify_header", as_stripe_15)
    sidecar.intent("op-1", "stripe")
    body = encoded(event("stripe_payment_intent_succeeded"))
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200, response.text
    with pytest.raises(stripe.SignatureVerificationError):  # what bytes got there
        as_stripe_15(body, signed(body)["Stripe-Signature"], SECRET, 300)


def test_signed_payment_intent_succeeded_records_a_bound_receipt(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "stripe")
    sidecar.attempt("op-1")
    body = encoded(event("stripe_payment_intent_succeeded"))
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200, response.text
    assert response.json() == {"delivery_id": "evt_3PwLx2E1vV0kQm1a0dJ5YhQb",
                               "operation_id": "op-1", "recorded": True,
                               "detail": "recorded as a receipt"}
    assert receipts(sidecar, "op-1") == [("webhook:stripe", "pi_3PwLx2E1vV0kQm1a0Xk3NcZt", H)]
    assert sidecar.get("/v1/operations/op-1")["verdict"] == "verified_applied"


@pytest.mark.parametrize("case", ["wrong_secret", "tampered_body", "no_header", "garbled"])
def test_a_bad_signature_gets_401_and_leaves_no_trace(sidecar: Sidecar, case: str) -> None:
    sidecar.intent("op-1", "stripe")
    body = encoded(event("stripe_payment_intent_succeeded"))
    headers = {"wrong_secret": signed(body, secret="whsec_not_ours"),
               "tampered_body": signed(body.replace(b'"amount":100', b'"amount":1')),
               "no_header": {},
               "garbled": {"Stripe-Signature": "t=soon,v1=zz"}}[case]
    before = traces(sidecar.store)
    assert_problem(deliver(sidecar, PATH, body, headers), 401, "webhook-rejected")
    assert traces(sidecar.store) == before
    assert receipts(sidecar, "op-1") == []


@pytest.mark.parametrize("offset_s", [-310, 310])
def test_a_timestamp_outside_five_minutes_gets_401(sidecar: Sidecar, offset_s: int) -> None:
    sidecar.intent("op-1", "stripe")
    body = encoded(event("stripe_payment_intent_succeeded"))
    before = traces(sidecar.store)
    response = deliver(sidecar, PATH, body, signed(body, at=int(time.time()) + offset_s))
    assert_problem(response, 401, "webhook-rejected")
    assert traces(sidecar.store) == before


def test_a_replayed_event_gets_401_and_is_recorded_once(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "stripe")
    body = encoded(event("stripe_payment_intent_succeeded"))
    assert deliver(sidecar, PATH, body, signed(body)).status_code == 200
    after_first = traces(sidecar.store)
    # Freshly signed (a captured delivery cannot be re-signed, but a retry is): still refused.
    assert_problem(deliver(sidecar, PATH, body, signed(body)), 401, "webhook-rejected")
    assert traces(sidecar.store) == after_first
    assert len(receipts(sidecar, "op-1")) == 1


@pytest.mark.parametrize(("days", "status"), [(2, 401), (29, 401), (31, 200)])
def test_an_event_is_remembered_for_the_30_days_stripe_can_send_it_again(
        sidecar: Sidecar, days: int, status: int) -> None:
    """Stripe retries for three days and resends by hand while it keeps the event (30 days);
    each retry is signed afresh, so only the remembered event id can refuse it, and
    `reconciler prune` in between forgets no event id."""
    sidecar.intent("op-1", "stripe")
    body = encoded(event("stripe_payment_intent_succeeded"))
    again = sent_again(sidecar, PATH, body, signed, timedelta(days=days),
                       meanwhile=lambda: prune(Ledger(sidecar.store), datetime.now(UTC)))
    assert again.status_code == status, again.text


def test_a_failed_payment_is_acknowledged_but_no_receipt(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "stripe")
    body = encoded(event("stripe_payment_intent_payment_failed"))
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200
    assert response.json()["recorded"] is False
    assert receipts(sidecar, "op-1") == []


@pytest.mark.parametrize(("operation_id", "owner"), [("op-1", "pay"), ("nope", None)])
def test_an_event_for_another_providers_or_an_unknown_operation_is_not_recorded(
        sidecar: Sidecar, operation_id: str, owner: str | None) -> None:
    if owner:
        sidecar.intent("op-1", owner)
    payload = event("stripe_payment_intent_succeeded")
    payload["data"]["object"]["metadata"]["operation_id"] = operation_id
    body = encoded(payload)
    response = deliver(sidecar, PATH, body, signed(body))
    assert response.status_code == 200
    assert response.json()["recorded"] is False
    assert response.json()["detail"] == f"no operation {operation_id!r} of provider 'stripe'"
    assert traces(sidecar.store) == (1, 0)


def test_without_a_configured_secret_deliveries_get_404(
        sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECONCILER_WEBHOOK_SECRET_STRIPE")
    body = encoded(event("stripe_payment_intent_succeeded"))
    problem = assert_problem(deliver(sidecar, PATH, body, signed(body)), 404,
                             "webhook-not-configured")
    assert "RECONCILER_WEBHOOK_SECRET_STRIPE" in problem["detail"]
    assert traces(sidecar.store) == (0, 0)
