"""The sidecar shuts down cleanly when its store refuses the last writes (a read-only
PostgreSQL, a SQLite file that cannot be written): the sweeper's probe leases stay until they
expire, a warning says so, and the shutdown itself does not fail. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from sqlalchemy import event

from reconciler.service import Settings, create_app
from reconciler.store.sql import SqlStore


def refuse_writes(connection: Any, record: Any, proxy: Any) -> None:
    """The store's own refusal of a write, as a read-only server or file gives it."""
    cursor = connection.cursor()
    if type(connection).__module__.startswith("sqlite3"):
        cursor.execute("PRAGMA query_only = ON")
    else:
        cursor.execute("SET SESSION default_transaction_read_only = on")
        connection.commit()  # it holds from the next transaction on: the store's
    cursor.close()


async def serve_then_refuse_writes(store_url: str) -> None:
    app = create_app(Settings(db=store_url, sweep_interval_s=0))
    async with app.router.lifespan_context(app):
        store = app.state.wiring.ledger.store
        assert isinstance(store, SqlStore)
        store.engine.dispose()  # every connection from here on is checked out anew
        event.listen(store.engine, "checkout", refuse_writes)


def test_a_store_that_refuses_writes_at_shutdown_is_logged_and_the_shutdown_ends(
        store_url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="reconciler.service.wiring"):
        asyncio.run(serve_then_refuse_writes(store_url))
    said = [r.getMessage() for r in caplog.records if r.name == "reconciler.service.wiring"]
    assert len(said) == 1, said
    assert "could not release its probe leases (another replica takes their operations " \
           "when they expire)" in said[0]
    assert "[SQL:" not in said[0]  # the store's own words, not the statement
