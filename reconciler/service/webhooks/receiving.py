"""What every provider's webhook route shares, once its signature has checked out: read the
event, find the operation it names, refuse a replay, and record a receipt.

    provider --POST--> verify signature + timestamp --no--> 401, nothing written
                              |
                             yes --> JSON event --> operation id from the provider's metadata
                                                           |
             delivery id seen before? --yes--> 401, nothing written
                              |
                              no --> delivery id (+ receipt if the operation is this
                                     provider's) in one transaction --> 200

An event that names no operation, an unknown one or another provider's is acknowledged
(200, `recorded: false`): the sender is genuine, and every provider retries a non-2xx answer
for hours to days, which would only repeat the same refusal.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from reconciler.core.domain import Receipt
from reconciler.core.ports import Delivery
from reconciler.core.schemas import Hash, Ident, Key, WebhookAck
from reconciler.ledger import Delivered
from reconciler.service.problems import MALFORMED_JSON, ProblemError, ProblemType
from reconciler.service.wiring import Wiring

log = logging.getLogger(__name__)

SECRET_ENV_PREFIX = "RECONCILER_WEBHOOK_SECRET_"
MAX_DELIVERY_ID = 255

REJECTED = ProblemType("webhook-rejected", 401, "Webhook signature, timestamp or delivery refused")
NOT_CONFIGURED = ProblemType("webhook-not-configured", 404, "No webhook secret is configured for "
                                                     "this provider")


def secret_env(provider: str) -> str:
    """The variable holding a provider's webhook secret: RECONCILER_WEBHOOK_SECRET_STRIPE, ..."""
    return SECRET_ENV_PREFIX + provider.upper().replace("-", "_").replace(".", "_")


def webhook_secret(provider: str) -> str:
    """The provider's secret, read on every delivery so a rotated one applies at once. Without
    one the route is not set up: 404 (the provider retries, and the deliveries arrive once it
    is set)."""
    name = secret_env(provider)
    value = os.environ.get(name, "").strip()
    if not value:
        log.warning("webhook for %s refused: %s is not set", provider, name)
        raise ProblemError(NOT_CONFIGURED, f"set {name} to the signing secret the provider "
                           "shows for this endpoint")
    return value


def body_digest(body: bytes) -> str:
    """The delivery id of a scheme that signs no id of its own: the SHA-256 of the body its
    signature (or credential) covers, so a copy sent again under any unsigned header is known."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


def rejected(provider: str, why: str) -> ProblemError:
    """A delivery that did not prove it came from the provider; `why` names no secret."""
    log.info("webhook for %s refused: %s", provider, why)
    return ProblemError(REJECTED, f"{provider} delivery refused: {why}")


def json_event(body: bytes) -> dict[str, Any]:
    """The verified body as a JSON object (400 otherwise, nothing recorded)."""
    try:
        event = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ProblemError(MALFORMED_JSON, "the webhook body is not valid JSON") from None
    if not isinstance(event, dict):
        raise ProblemError(MALFORMED_JSON, "the webhook body is not a JSON object")
    return event


def dig(data: Any, path: str) -> Any:
    """`data` at a dotted path (`data.object.metadata.operation_id`); None if any step is
    missing or not an object."""
    for step in path.split("."):
        if not isinstance(data, Mapping):
            return None
        data = data.get(step)
    return data


class EventReceipt(BaseModel):
    """The operation an event names and the provider's object that proves it; checked like
    the API's input, so nothing long or odd reaches the store through provider metadata."""

    model_config = ConfigDict(frozen=True)

    operation_id: Ident
    provider_ref: Key
    request_hash: Hash | None = None


def event_receipt(operation_id: Any, provider_ref: Any,
                  request_hash: Any) -> EventReceipt | str:
    """An `EventReceipt`, or why the event names no usable operation."""
    if operation_id is None:
        return "the event carries no operation_id in its metadata"
    try:
        return EventReceipt(operation_id=operation_id, provider_ref=str(provider_ref or ""),
                            request_hash=request_hash)
    except ValidationError as exc:
        fields = ", ".join(str(e["loc"][0]) for e in exc.errors())
        return f"the event's {fields} is not usable"


def accept(wiring: Wiring, provider: str, delivery_id: str, keep_for: timedelta | None,
           event: EventReceipt | str, *, scheme: str | None = None) -> WebhookAck:
    """Record the delivery once, with a receipt (source `webhook:<provider>`) when the event
    names one of this provider's operations. A replay is refused (401) and writes nothing.
    `delivery_id` must come from what the signature covers (never an unsigned header), and is
    kept for `keep_for` (None: for good). Ids are unique per `scheme` (default: the provider),
    whose ids are kept alike."""
    if not 0 < len(delivery_id) <= MAX_DELIVERY_ID:
        raise rejected(provider, "the delivery id is missing or too long")
    now = wiring.ledger.clock()
    receipt = Receipt(event.operation_id, now, event.provider_ref, event.request_hash,
                      f"webhook:{provider}") if isinstance(event, EventReceipt) else None
    delivered = wiring.ledger.record_delivery(
        provider, Delivery(scheme or provider, delivery_id, now, keep_for), receipt)
    if delivered is Delivered.REPLAY:
        raise rejected(provider, "this delivery id was accepted before (a replay)")
    if isinstance(event, str):
        detail = event
    elif delivered is Delivered.RECORDED:
        detail = "recorded as a receipt"
    else:
        detail = f"no operation {event.operation_id!r} of provider {provider!r}"
    return WebhookAck(delivery_id=delivery_id,
                      operation_id=event.operation_id if isinstance(event, EventReceipt) else None,
                      recorded=delivered is Delivered.RECORDED, detail=detail)
