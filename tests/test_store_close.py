"""Closing a SQL store gives every connection back: the group committer's held connection
first, then the pool's, so no database session outlives the store (bench/replicas.py found the
committer's PostgreSQL session open until a garbage collection when the engine was disposed of
under it)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, text

from reconciler.core.domain import Effect, Intent
from reconciler.ledger import Ledger, utcnow
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore


def sessions_named(url: str, name: str) -> int:
    observer = create_engine(url)
    try:
        with observer.connect() as conn:
            return int(conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"),
                {"name": name}).scalar_one())
    finally:
        observer.dispose()


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)  # it shows its sessions
def test_closing_a_store_closes_the_committers_connection(store_url: str) -> None:
    name = f"close-{uuid.uuid4().hex[:12]}"
    named = f"{store_url}{'&' if '?' in store_url else '?'}application_name={name}"
    store = open_store(named)
    assert isinstance(store, SqlStore)
    Ledger(store).record_intent(Intent("op-1", "h" * 64, "key-op-1", "pay", "charge",
                                       Effect.NON_IDEMPOTENT, utcnow()))
    assert sessions_named(store_url, name) >= 1  # the committer holds its connection
    store.close()
    assert sessions_named(store_url, name) == 0
