"""Replicas started together on an empty PostgreSQL schema wait for each other's migration
instead of racing on it (UniqueViolation on alembic_version, or a table created twice)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import pytest

from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore

from databases import pg_schema, pg_unreachable

OPENERS, TRIES = 4, 10


def open_together(url: str, start: threading.Barrier) -> SqlStore:
    start.wait(timeout=30)
    return open_store(url)


def test_four_stores_opened_at_once_on_an_empty_schema_all_come_up() -> None:
    if reason := pg_unreachable():
        pytest.skip(reason)
    for _ in range(TRIES):
        with pg_schema() as schema_url:
            # Bounded: a lock wait that would hang (the race's symptom) fails after 30 s.
            url = schema_url + quote(" -clock_timeout=30s")
            start = threading.Barrier(OPENERS)
            with ThreadPoolExecutor(OPENERS) as pool:
                stores = list(pool.map(open_together, [url] * OPENERS, [start] * OPENERS))
            try:
                for store in stores:
                    store.ready()
            finally:
                for store in stores:
                    store.engine.dispose()
