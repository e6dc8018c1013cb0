"""Opening a store: the engine with SQLite's durability settings, and the Alembic upgrade."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import StaticPool

from reconciler.store.sql import SqlStore

DEFAULT_URL = "sqlite:///reconciler.db"
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def make_engine(url: str) -> Engine:
    """An engine for `url`. SQLite gets WAL and synchronous=FULL, so an acknowledged intent
    survives a crash and a power cut, and BEGIN IMMEDIATE, so two writers never interleave."""
    if not url.startswith("sqlite"):
        # No pre-ping: it costs a round trip per transaction. A connection that died with a
        # server restart fails its transaction (a clear StoreUnavailableError, nothing half
        # written), and SQLAlchemy then drops the pool's stale connections.
        return create_engine(url)
    in_memory = url in ("sqlite://", "sqlite:///:memory:")
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        poolclass=StaticPool if in_memory else None,
    )

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        # Driver-level autocommit: SQLAlchemy's "begin" hook below owns transaction starts.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def alembic_config() -> Config:
    """The Alembic configuration for the store's migrations, usable without an ini file."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration (a no-op when it is there already)."""
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def open_store(url: str = DEFAULT_URL) -> SqlStore:
    """Open (and migrate) the store at a SQLAlchemy URL."""
    engine = make_engine(url)
    upgrade(engine)
    return SqlStore(engine)
