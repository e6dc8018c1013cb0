"""Postmark signs nothing: no HMAC, no timestamp. What it documents instead is HTTP Basic
credentials in the webhook URL (`https://<user>:<password>@host/v1/webhooks/postmark`, which
Postmark sends as `Authorization: Basic`) and firewalling to the IPs it publishes. So this route
requires the Basic credentials (RECONCILER_WEBHOOK_SECRET_POSTMARK = `user:password`) and, when
RECONCILER_WEBHOOK_POSTMARK_ALLOWED_IPS lists networks (CIDRs, comma-separated), the peer's
address in one of them (the peer: behind a proxy, the proxy). That is weaker than a signature:
the credentials travel with every delivery, so serve it over HTTPS only.

Postmark sends no delivery id either; a retry repeats the body byte for byte, so the body's
SHA-256 is the delivery id, kept for good: there is no timestamp to age it out (Postmark's own
retries span about 10.5 hours, see the second link). The operation is the message's
`Metadata.operation_id` (set `Metadata` when sending), on Delivery, Bounce, SpamComplaint, Open
and Click events: each says Postmark sent the message. The receipt's ref is the `MessageID`.
https://postmarkapp.com/developer/webhooks/webhooks-overview#protecting-your-webhook
https://postmarkapp.com/support/article/understanding-inbound-webhook-retries-in-postmark
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import os

from fastapi import Request

from reconciler.core.schemas import WebhookAck
from reconciler.service.problems import ProblemError, problem_responses
from reconciler.service.webhooks.receiving import (
    NOT_CONFIGURED,
    EventReceipt,
    accept,
    body_digest,
    dig,
    event_receipt,
    json_event,
    rejected,
    webhook_secret,
)
from reconciler.service.webhooks.routes import router
from reconciler.service.webhooks.signing import RawBody
from reconciler.service.wiring import Wired

ALLOWED_IPS_ENV = "RECONCILER_WEBHOOK_POSTMARK_ALLOWED_IPS"
#: Record types that say the message left Postmark (https://postmarkapp.com/developer/webhooks).
SENT_RECORDS = frozenset({"Delivery", "Bounce", "SpamComplaint", "Open", "Click"})


@router.post("/postmark", response_model=WebhookAck, responses=problem_responses(400, 401, 404))
def postmark_webhook(body: RawBody, request: Request, wiring: Wired) -> WebhookAck:
    """A Postmark webhook (Basic credentials `user:password` in
    RECONCILER_WEBHOOK_SECRET_POSTMARK)."""
    expected = webhook_secret("postmark").encode()
    if not hmac.compare_digest(_basic(request.headers.get("authorization", "")), expected):
        raise rejected("postmark", "the Basic credentials are missing or wrong")
    peer = request.client.host if request.client else ""
    if not _allowed(peer):
        raise rejected("postmark", f"{peer or 'the peer'} is not in {ALLOWED_IPS_ENV}")
    event = json_event(body)
    record = event.get("RecordType")
    named: EventReceipt | str = f"a {record} record is not a receipt"
    if record in SENT_RECORDS:
        named = event_receipt(dig(event, "Metadata.operation_id"), event.get("MessageID"),
                              dig(event, "Metadata.request_hash"))
    return accept(wiring, "postmark", body_digest(body), None, named)


def _basic(header: str) -> bytes:
    """`user:password` from an Authorization: Basic header; b"" for anything else."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return b""
    try:
        return base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return b""


def _allowed(peer: str) -> bool:
    listed = os.environ.get(ALLOWED_IPS_ENV, "").strip()
    if not listed:
        return True
    try:
        networks = [ipaddress.ip_network(n.strip()) for n in listed.split(",") if n.strip()]
    except ValueError:
        raise ProblemError(NOT_CONFIGURED, f"{ALLOWED_IPS_ENV} must list networks such as "
                           "3.134.147.250/32, comma-separated") from None
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(address in network for network in networks)
