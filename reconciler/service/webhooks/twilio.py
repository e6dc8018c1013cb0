"""Twilio: message status callbacks, form-encoded POSTs signed with `X-Twilio-Signature`, the
base64 HMAC-SHA1, under the account's auth token, of the full URL Twilio requested followed by
every POST parameter, sorted by name, as name + value. Checked by the `twilio` package's own
`RequestValidator` (install `effect-reconciler[twilio]`; without it the route answers 404 and
says so), which also tries the URL with and without its port, as Twilio's own docs advise.
https://www.twilio.com/docs/usage/webhooks/webhooks-security#validating-signatures-from-twilio

A message's callback is the `StatusCallback` URL the worker sets when it creates the message
(`POST /2010-04-01/Accounts/{sid}/Messages.json`); Twilio's signature covers that URL whole,
query string included, so what the worker puts there is as signed as the body. The worker
names its operation there: `StatusCallback=<this route>?operation_id=<id>` (with
`&request_hash=sha256:<hex>` to bind the receipt to the request), as it would in a provider's
metadata; a Twilio message carries none. The callback's `MessageSid` is the receipt's ref, and
when the operation's attempt recorded a message SID as its reference (the create response's
`sid`), a callback naming another message is not this operation's receipt. A callback is the
effect when `MessageStatus` says the message was, or will be, handed on (the statuses the
`twilio.message` probe counts as the effect); `failed` and `canceled` are acknowledged only.
https://www.twilio.com/docs/messaging/guides/track-outbound-message-status

Behind a proxy the URL Twilio requested is not the one this process sees: set
RECONCILER_WEBHOOK_TWILIO_URL to the public URL of this route (no query string; the request's
own is appended). Twilio signs no timestamp and no delivery id: a callback is known again by
the SHA-256 of the URL and body its signature covers, kept for good (a captured callback
verifies forever; each status of a message is a callback of its own).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from fastapi import Request

from probes.recipes.twilio import EFFECT_STATUS
from reconciler.core.errors import ReconcilerError
from reconciler.core.schemas import WebhookAck
from reconciler.service.problems import ProblemError, problem_responses
from reconciler.service.webhooks.receiving import (
    NOT_CONFIGURED,
    EventReceipt,
    accept,
    event_receipt,
    rejected,
    webhook_secret,
)
from reconciler.service.webhooks.routes import router
from reconciler.service.webhooks.signing import RawBody
from reconciler.service.wiring import Wired, Wiring

URL_ENV = "RECONCILER_WEBHOOK_TWILIO_URL"


@router.post("/twilio", response_model=WebhookAck, responses=problem_responses(400, 401, 404))
def twilio_webhook(body: RawBody, request: Request, wiring: Wired) -> WebhookAck:
    """A Twilio message status callback (the account's auth token in
    RECONCILER_WEBHOOK_SECRET_TWILIO; content type application/x-www-form-urlencoded)."""
    validator = _validator(webhook_secret("twilio"))
    url = public_url(str(request.url))
    try:
        params = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True,
                                strict_parsing=bool(body)))
    except (UnicodeDecodeError, ValueError):
        raise rejected("twilio", "the body is not a form-encoded callback") from None
    if not validator.validate(url, params, request.headers.get("x-twilio-signature", "")):
        raise rejected("twilio", "X-Twilio-Signature does not verify with the auth token over "
                       f"{urlsplit(url).path} and the POST parameters")
    delivery = "sha256:" + hashlib.sha256(url.encode() + b"\n" + body).hexdigest()
    return accept(wiring, "twilio", delivery, None, _named(wiring, url, params))


def public_url(seen: str) -> str:
    """The URL Twilio requested: RECONCILER_WEBHOOK_TWILIO_URL with the request's query string
    when set, else the URL this process was asked."""
    base = os.environ.get(URL_ENV, "").strip()
    if not base:
        return seen
    query = urlsplit(seen).query
    return base + ("?" + query if query else "")


def _validator(token: str) -> Any:
    try:
        from twilio.request_validator import RequestValidator
    except ImportError:
        raise ProblemError(NOT_CONFIGURED, "Twilio callbacks are checked by the twilio "
                           "package's RequestValidator: install effect-reconciler[twilio]"
                           ) from None
    return RequestValidator(token)


def _named(wiring: Wiring, url: str, params: Mapping[str, str]) -> EventReceipt | str:
    """The operation the signed callback URL names, when the callback is its message's and
    says the message was sent; otherwise why not."""
    status, sid = params.get("MessageStatus"), params.get("MessageSid")
    if status not in EFFECT_STATUS:
        return f"a {status or 'status-less'} message callback is not a receipt"
    named = dict(parse_qsl(urlsplit(url).query))
    event = event_receipt(named.get("operation_id"), sid, named.get("request_hash"))
    if isinstance(event, str) or not sid:
        return "the callback names no message" if not sid else \
            f"{event} (set StatusCallback=<this route>?operation_id=<id>)"
    recorded = _recorded_sids(wiring, event.operation_id)
    if recorded and sid not in recorded:
        return (f"message {sid} is not the one operation {event.operation_id!r} recorded "
                f"({', '.join(sorted(recorded))})")
    return event


def _recorded_sids(wiring: Wiring, operation_id: str) -> set[str]:
    """The message SIDs the operation's attempts recorded as their reference (none for an
    unknown operation, which `accept` then reports)."""
    try:
        facts = wiring.store.facts(operation_id)
    except ReconcilerError:
        return set()
    return {a.receipt.provider_ref for a in facts.attempts
            if a.receipt is not None and a.receipt.provider_ref}
