"""Every kind of store the suite runs against: the in-memory twin, SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reconciler.core.ports import Store
from reconciler.store.memory import MemoryStore
from reconciler.store.schema import open_store

from databases import pg_unreachable
from service_harness import database

KINDS = ["memory", "sqlite", "postgresql"]


@contextmanager
def opened(kind: str, tmp_path: Path) -> Iterator[Store]:
    """A fresh, empty store of `kind` (PostgreSQL skipped, with the reason, when unreachable)."""
    if kind == "memory":
        yield MemoryStore()
        return
    if kind == "postgresql" and (reason := pg_unreachable()):
        pytest.skip(reason)
    with database(kind, tmp_path) as url:
        store = open_store(url)
        try:
            yield store
        finally:
            store.engine.dispose()
