"""Provider callbacks: a webhook is a receipt the provider pushes instead of one a probe pulls."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from reconciler.domain import Receipt
from reconciler.schemas import WebhookAck, WebhookIn
from reconciler.service.problems import problem_responses
from reconciler.service.wiring import Wired

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

Provider = Annotated[str, Path(min_length=1, max_length=100)]


@router.post("/{provider}", status_code=202, response_model=WebhookAck,
             responses=problem_responses(404))
def provider_callback(provider: Provider, body: WebhookIn, wiring: Wired) -> WebhookAck:
    """Record the callback as a receipt (source `webhook`). The provider learns nothing of the
    verdict: it is told only that the callback was accepted."""
    wiring.ledger.record_provider_evidence(provider, Receipt(
        body.operation_id, wiring.ledger.clock(), body.provider_ref, body.request_hash,
        "webhook"))
    return WebhookAck(operation_id=body.operation_id, accepted=True)
