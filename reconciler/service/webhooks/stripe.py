"""Stripe: `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`, five minutes.

The check is the `stripe` SDK's own (`WebhookSignature.verify_header`, what
`stripe.Webhook.construct_event` runs before parsing), plus a bound on timestamps in the future,
which the SDK leaves open and the replay window needs. The operation is the event object's
`metadata.operation_id` (PaymentIntent and Charge metadata; set it when creating the object),
and its `metadata.request_hash`, if set, binds the receipt to the request.
https://docs.stripe.com/webhooks#verify-events

A delivery is known again by the event id inside the signed body (`evt_...`): Stripe signs each
retry again with a new `t`, so a hash of `t.body` would make every retry a new delivery, and the
body itself is not byte-stable across retries (`pending_webhooks` counts down). The id is kept
for RETRY_WINDOW.
"""

from __future__ import annotations

import time
from datetime import timedelta

from fastapi import Request
from stripe import SignatureVerificationError, WebhookSignature

from reconciler.core.schemas import WebhookAck
from reconciler.service.problems import problem_responses
from reconciler.service.webhooks.receiving import (
    accept,
    dig,
    event_receipt,
    json_event,
    rejected,
    webhook_secret,
)
from reconciler.service.webhooks.routes import router
from reconciler.service.webhooks.signing import TOLERANCE_S, RawBody, remember
from reconciler.service.wiring import Wired

#: Events whose object is the effect done: a failed or canceled object is not the effect.
RECEIPT_EVENTS = frozenset({"payment_intent.succeeded", "charge.succeeded", "charge.captured",
                            "invoice.paid"})
#: Live mode retries an event for up to three days (https://docs.stripe.com/workbench/webhooks),
#: and an event can be resent by hand (Dashboard, `stripe events resend`) while Stripe keeps
#: it: events are listed and retrieved going back 30 days (https://docs.stripe.com/api/events/list).
RETRY_WINDOW = timedelta(days=30)


@router.post("/stripe", response_model=WebhookAck, responses=problem_responses(400, 401, 404))
def stripe_webhook(body: RawBody, request: Request, wiring: Wired) -> WebhookAck:
    """A Stripe event (an endpoint's `whsec_` secret in RECONCILER_WEBHOOK_SECRET_STRIPE)."""
    secret = webhook_secret("stripe")
    header = request.headers.get("stripe-signature")
    try:
        # Text, not bytes: stripe 10 to 15 format the signed payload as "%d.%s" % (t, payload),
        # so bytes become "b'...'" and no genuine delivery verifies; 16 decodes bytes itself.
        # Stripe signs the UTF-8 body, so a body that is not UTF-8 is no delivery of Stripe's.
        WebhookSignature.verify_header(body.decode("utf-8"), header, secret,
                                       tolerance=TOLERANCE_S)
    except (SignatureVerificationError, UnicodeDecodeError):
        raise rejected("stripe", "Stripe-Signature does not verify with the endpoint secret, "
                       f"or its timestamp is more than {TOLERANCE_S}s old") from None
    assert header is not None  # verify_header refuses a missing one
    if _signed_at(header) > time.time() + TOLERANCE_S:
        raise rejected("stripe", "Stripe-Signature's timestamp is in the future")
    event = json_event(body)
    kind, obj = event.get("type"), dig(event, "data.object")
    named = (event_receipt(dig(obj, "metadata.operation_id"), dig(obj, "id"),
                           dig(obj, "metadata.request_hash"))
             if kind in RECEIPT_EVENTS else f"a {kind} event is not a receipt")
    return accept(wiring, "stripe", str(event.get("id") or ""), remember(RETRY_WINDOW), named)


def _signed_at(header: str) -> int:
    # verify_header has parsed it already, so "t" is there and an integer.
    return next(int(value) for key, _, value in (item.partition("=")
                                                 for item in header.split(",")) if key == "t")
