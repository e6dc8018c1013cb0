"""The delivery table (reconciler/store/deliveries.py), on SQLite and on PostgreSQL: an id is
accepted once; it is written in one transaction with its receipt; ids of timestamped schemes
age out once their replay window has closed, the others stay."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from reconciler.domain import Effect, Intent, Receipt
from reconciler.store.deliveries import Delivery, accept_delivery
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore
from reconciler.store.tables import WebhookDeliveryRow

from builders import H0, K0

NOW = datetime.now(UTC)
WINDOW = timedelta(minutes=11)


@pytest.fixture
def store(store_url: str) -> Iterator[SqlStore]:
    opened = open_store(store_url)
    opened.record_intent(Intent("op-1", H0, K0, "stripe", "charge", Effect.NON_IDEMPOTENT, NOW))
    try:
        yield opened
    finally:
        opened.engine.dispose()


def kept(store: SqlStore) -> set[tuple[str, str]]:
    with store.engine.connect() as conn:
        return {(r.provider, r.delivery_id) for r in conn.execute(select(WebhookDeliveryRow))}


def test_an_id_is_accepted_once(store: SqlStore) -> None:
    delivery = Delivery("stripe", "evt_1", NOW, WINDOW)
    assert accept_delivery(store, delivery, None) is True
    assert accept_delivery(store, delivery, None) is False
    assert kept(store) == {("stripe", "evt_1")}


def test_an_id_whose_receipt_cannot_be_written_is_not_kept(store: SqlStore) -> None:
    orphan = Receipt("no-such-op", NOW, "pi_1", H0, "webhook:stripe")
    with pytest.raises(IntegrityError):
        accept_delivery(store, Delivery("stripe", "evt_1", NOW, WINDOW), orphan)
    assert kept(store) == set()
    receipt = Receipt("op-1", NOW, "pi_1", H0, "webhook:stripe")
    assert accept_delivery(store, Delivery("stripe", "evt_1", NOW, WINDOW), receipt) is True
    assert list(store.facts("op-1").evidence) == [receipt]


def test_timestamped_ids_age_out_after_their_window_and_unsigned_ones_stay(
        store: SqlStore) -> None:
    old = NOW - WINDOW - timedelta(seconds=1)
    accept_delivery(store, Delivery("stripe", "evt_old", old, WINDOW), None)
    accept_delivery(store, Delivery("github", "guid-old", old, None), None)
    accept_delivery(store, Delivery("stripe", "evt_recent", NOW - WINDOW / 2, WINDOW), None)
    accept_delivery(store, Delivery("stripe", "evt_new", NOW, WINDOW), None)
    assert kept(store) == {("github", "guid-old"), ("stripe", "evt_recent"),
                           ("stripe", "evt_new")}
