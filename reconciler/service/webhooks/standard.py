"""Standard Webhooks (used by Svix and the many providers built on it): `webhook-id`,
`webhook-timestamp` and `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`,
within five minutes either way, checked by the `standardwebhooks` package. The secret is the
`whsec_<base64>` the provider shows, in RECONCILER_WEBHOOK_SECRET_STANDARD_<PROVIDER>.

Senders that deliver through Svix (Clerk, Resend, ...) send the same scheme under Svix's own
header names, `svix-id`, `svix-timestamp` and `svix-signature` (Svix's docs: "svix-id ... or
webhook-id for unbranded"; its `svix` library reads `svix-*` and falls back to `webhook-*`).
A delivery is read under one family whole: `webhook-*` when `webhook-id` is there, `svix-*`
otherwise, so a mix of the two never verifies, and both families share one delivery-id space.
https://docs.svix.com/receiving/verifying-payloads/how-manual

The spec fixes no payload beyond `type`, `timestamp` and `data`; the operation is
`data.metadata.operation_id` (and `data.metadata.request_hash`), the receipt's ref `data.id`,
and `{provider}` in the path must be the intent's provider.

A delivery is known again by its `webhook-id`, which the signature covers (`id.ts.body`) and
which "remains the same no matter how many times a webhook that has failed is retried", while
each retry is signed at a new time. The spec recommends retrying "following a retry schedule
spanning multiple days"; its example's last retry is 75 h 35 min after the first attempt, so
ids are kept for RETRY_WINDOW, a week.
https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated

from fastapi import Path, Request
from standardwebhooks.webhooks import (
    EmptyWebhookSecretError,
    Webhook,
    WebhookVerificationError,
)

from reconciler.core.schemas import WebhookAck
from reconciler.service.problems import ProblemError, problem_responses
from reconciler.service.webhooks.receiving import (
    NOT_CONFIGURED,
    accept,
    dig,
    event_receipt,
    json_event,
    rejected,
    secret_env,
    webhook_secret,
)
from reconciler.service.webhooks.routes import router
from reconciler.service.webhooks.signing import TOLERANCE_S, RawBody, remember
from reconciler.service.wiring import Wired

RETRY_WINDOW = timedelta(days=7)
Provider = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-]+$")]


@router.post("/standard/{provider}", response_model=WebhookAck,
             responses=problem_responses(400, 401, 404))
def standard_webhook(provider: Provider, body: RawBody, request: Request,
                     wiring: Wired) -> WebhookAck:
    """A Standard Webhooks delivery from `provider`."""
    secret_name = f"standard_{provider}"
    try:
        webhook = Webhook(webhook_secret(secret_name))
    except (EmptyWebhookSecretError, binascii.Error, ValueError):
        raise ProblemError(NOT_CONFIGURED, f"{secret_env(secret_name)} is not a Standard "
                           "Webhooks secret (whsec_ followed by base64)") from None
    signed = standard_headers(request.headers)
    try:
        webhook.verify(body, signed, json_parse=False)
    except (WebhookVerificationError, ValueError):  # ValueError: malformed header or body
        raise rejected(provider, "webhook-signature (or svix-signature) does not verify with "
                       "the secret, or webhook-timestamp (svix-timestamp) is more than "
                       f"{TOLERANCE_S}s off") from None
    event = json_event(body)
    data = event.get("data")
    named = event_receipt(dig(data, "metadata.operation_id"), dig(data, "id"),
                          dig(data, "metadata.request_hash"))
    return accept(wiring, provider, signed.get("webhook-id", ""),
                  remember(RETRY_WINDOW), named, scheme=f"standard:{provider}")


_PARTS = ("id", "timestamp", "signature")


def standard_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The `webhook-*` headers the verifier reads: the delivery's own, or its `svix-*` ones
    renamed when it has no `webhook-id` (one family whole; a missing one stays missing)."""
    family = "webhook" if "webhook-id" in headers else "svix"
    return {f"webhook-{part}": headers[f"{family}-{part}"] for part in _PARTS
            if f"{family}-{part}" in headers}
