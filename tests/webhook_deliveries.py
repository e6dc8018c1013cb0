"""Deliveries signed the way each provider documents, posted to the sidecar, and what the store
then holds. Secrets come from the environment, as in production (`secrets` sets them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlmodel import col

from reconciler.store.sql import SqlStore
from reconciler.store.tables import EvidenceRow, WebhookDeliveryRow

from sidecar_client import Sidecar


def set_secret(monkeypatch: pytest.MonkeyPatch, provider: str, value: str) -> None:
    monkeypatch.setenv(f"RECONCILER_WEBHOOK_SECRET_{provider.upper()}", value)


def encoded(event: dict[str, Any]) -> bytes:
    """A body as providers send it: compact JSON, which the signature covers byte for byte."""
    return json.dumps(event, separators=(",", ":")).encode()


def deliver(sidecar: Sidecar, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    """POST without the sidecar client's bearer token: a provider has none."""
    return httpx.post(sidecar.url + path, content=body, timeout=30,
                      headers={"Content-Type": "application/json", **headers})


def receipts(sidecar: Sidecar, op: str) -> list[tuple[str, str, str | None]]:
    """(source, provider_ref, request_hash) of the operation's receipts, as the API shows them."""
    evidence = sidecar.get(f"/v1/operations/{op}")["evidence"]
    return [(e["source"], e["provider_ref"], e["request_hash"]) for e in evidence
            if e["kind"] == "receipt"]


def traces(store: SqlStore) -> tuple[int, int]:
    """How many delivery ids and evidence rows the store holds."""
    with store.engine.connect() as conn:
        deliveries = conn.execute(select(func.count()).select_from(WebhookDeliveryRow)).scalar()
        evidence = conn.execute(select(func.count()).select_from(EvidenceRow)).scalar()
    return int(deliveries or 0), int(evidence or 0)


def age_deliveries(store: SqlStore, by: timedelta) -> None:
    """Move every remembered delivery `by` into the past, as if it had arrived that long ago
    (row by row: SQLite keeps times as text, so no arithmetic in SQL)."""
    provider, delivery_id, received_at = (col(WebhookDeliveryRow.provider),
                                          col(WebhookDeliveryRow.delivery_id),
                                          col(WebhookDeliveryRow.received_at))
    with store.engine.begin() as conn:
        for scheme, key, at in conn.execute(select(provider, delivery_id, received_at)).all():
            conn.execute(update(WebhookDeliveryRow)
                         .where(provider == scheme, delivery_id == key)
                         .values(received_at=at - by))


def sent_again(sidecar: Sidecar, path: str, body: bytes,
               sign: Callable[[bytes], dict[str, str]], later: timedelta,
               meanwhile: Callable[[], object] = lambda: None) -> httpx.Response:
    """Deliver `body` (accepted), let `later` pass for the remembered deliveries, run
    `meanwhile`, and deliver it again, freshly signed as a provider's retry is: the answer."""
    first = deliver(sidecar, path, body, sign(body))
    assert first.status_code == 200, first.text
    age_deliveries(sidecar.store, later)
    meanwhile()
    return deliver(sidecar, path, body, sign(body))


EVENTS = Path(__file__).parent / "data" / "webhooks"


def event(name: str) -> dict[str, Any]:
    """A real-shaped provider event from tests/data/webhooks (operation op-1, hash H)."""
    loaded: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))
    return loaded
