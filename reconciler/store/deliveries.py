"""Webhook deliveries: a delivery id is accepted once, and its receipt recorded with it.

The id and the receipt share one transaction: a delivery whose receipt could not be written
(store down) leaves no id behind, so the provider's retry is not refused as a replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, insert
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from reconciler.domain import Receipt
from reconciler.store import rows
from reconciler.store.sql import INSERT_EVIDENCE, SqlStore
from reconciler.store.tables import WebhookDeliveryRow

INSERT_DELIVERY = insert(WebhookDeliveryRow.__table__)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery as its provider identifies it. `keep_for`: how long the id must be kept to
    refuse its replay; None for schemes without a signed timestamp, whose ids are kept for good."""

    provider: str
    delivery_id: str
    received_at: datetime
    keep_for: timedelta | None


def accept_delivery(store: SqlStore, delivery: Delivery, receipt: Receipt | None) -> bool:
    """Record the delivery id (and the receipt, if any) once. False, with nothing written, when
    the id was accepted before: a replay."""
    with store.session() as s:
        if delivery.keep_for is not None:
            # Older ids cannot come back: their signed timestamps are outside the tolerance.
            s.execute(delete(WebhookDeliveryRow).where(
                col(WebhookDeliveryRow.provider) == delivery.provider,
                col(WebhookDeliveryRow.received_at) < delivery.received_at - delivery.keep_for))
        try:
            with s.begin_nested():
                s.execute(INSERT_DELIVERY, {"provider": delivery.provider,
                                            "delivery_id": delivery.delivery_id,
                                            "received_at": delivery.received_at})
        except IntegrityError:
            return False
        if receipt is not None:
            s.execute(INSERT_EVIDENCE, rows.evidence_values(receipt))
    return True
