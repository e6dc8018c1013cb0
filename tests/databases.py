"""The databases tests run against: a SQLite file always, PostgreSQL when it is reachable.

Each PostgreSQL user gets a schema of its own (dropped afterwards), selected through the
connection's search_path, so tests never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from urllib.parse import quote

import sqlalchemy

PG_URL = os.environ.get("RECONCILER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@cache
def pg_unreachable() -> str | None:
    """Why PostgreSQL cannot be used, or None when it can."""
    engine = sqlalchemy.create_engine(PG_URL, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as exc:  # any failure to connect means: skip, and say why
        return f"PostgreSQL not reachable at {PG_URL}: {type(exc).__name__}"
    finally:
        engine.dispose()
    return None


@contextmanager
def pg_schema() -> Iterator[str]:
    """A URL whose connections live in a fresh, private schema."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sqlalchemy.create_engine(PG_URL)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()
