"""Slack: `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>">` with
`X-Slack-Request-Timestamp` within five minutes, checked by `slack_sdk`'s `SignatureVerifier`.
Slack retries a delivery with the same `event_id`, inside the signed body, which is the
delivery id: a retry is signed again with a new timestamp, so `v0:ts:body` would not know it.
Slack retries three times, at once, after a minute and after five minutes
(https://docs.slack.dev/apis/events-api/); the id is kept for the SPEC's three days.

Answers the (signed) `url_verification` challenge Slack sends when the Request URL is set. The
operation is a `message_metadata_posted` event's `metadata.event_payload.operation_id` (post
the message with that metadata, and subscribe the app to its event type in the manifest's
`metadata_subscriptions`); the receipt's ref is the message's `message_ts`.
https://docs.slack.dev/authentication/verifying-requests-from-slack/
https://docs.slack.dev/reference/events/message_metadata_posted/
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from slack_sdk.signature import SignatureVerifier

from reconciler.core.schemas import WebhookAck
from reconciler.service.problems import problem_responses
from reconciler.service.webhooks.receiving import (
    EventReceipt,
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

#: Slack's last retry comes about five minutes after the first try; remember() keeps 3 days.
RETRY_WINDOW = timedelta(minutes=6)
_CHALLENGE: dict[int | str, dict[str, Any]] = {
    200: {"description": 'the url_verification challenge, echoed: `{"challenge": "..."}`'}}


@router.post("/slack", response_model=WebhookAck,
             responses={**problem_responses(400, 401, 404), **_CHALLENGE})
def slack_webhook(body: RawBody, request: Request, wiring: Wired) -> Any:
    """A Slack Events API delivery (the app's signing secret in
    RECONCILER_WEBHOOK_SECRET_SLACK)."""
    verifier = SignatureVerifier(webhook_secret("slack"))
    try:
        valid = verifier.is_valid(body, request.headers.get("x-slack-request-timestamp"),
                                  request.headers.get("x-slack-signature"))
    except (ValueError, UnicodeDecodeError):  # a timestamp that is no integer
        valid = False
    if not valid:
        raise rejected("slack", "X-Slack-Signature does not verify with the signing secret, or "
                       f"X-Slack-Request-Timestamp is more than {TOLERANCE_S}s off")
    event = json_event(body)
    if event.get("type") == "url_verification":
        return JSONResponse({"challenge": str(event.get("challenge", ""))})
    inner = event.get("event")
    named: EventReceipt | str = f"a {dig(inner, 'type')} event is not a receipt"
    if dig(inner, "type") == "message_metadata_posted":
        payload = dig(inner, "metadata.event_payload")
        named = event_receipt(dig(payload, "operation_id"), dig(inner, "message_ts"),
                              dig(payload, "request_hash"))
    return accept(wiring, "slack", str(event.get("event_id") or ""), remember(RETRY_WINDOW),
                  named)
