"""Opening a store: the engine with SQLite's durability settings, and the Alembic upgrade."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError, OperationalError
from sqlalchemy.pool import StaticPool

from reconciler.core.errors import StoreUnavailableError, StoreUrlError
from reconciler.store.sql import READING_OPTION, SqlStore

DEFAULT_URL = "sqlite:///reconciler.db"
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


#: Connections a store's pool keeps open (`db_pool_size`): the service's request threads and
#: its sweep share them. SQLAlchemy's default of 5 (and 10 overflow, closed when returned)
#: made about every second request at 16 connections open a new PostgreSQL backend session.
DEFAULT_POOL_SIZE = 16
#: Beyond the pool, connections opened while busy (closed when returned): up to the request
#: thread pool's 40 threads (anyio's default) in all.
POOL_OVERFLOW = 40


def _pool(pool_size: int) -> dict[str, Any]:
    return {"pool_size": pool_size, "max_overflow": max(0, POOL_OVERFLOW - pool_size)}


#: The databases the store is written for, as SQLAlchemy names their dialects.
STORE_BACKENDS = ("sqlite", "postgresql")


def supported_store_url(url: str) -> None:
    """StoreUrlError unless `url` is a SQLite or PostgreSQL URL (checked before SQLAlchemy
    loads a driver: `mysql://` failed on the missing MySQLdb module, with a traceback)."""
    try:
        backend = make_url(url).get_backend_name()
    except ArgumentError:
        backend = None
    if backend not in STORE_BACKENDS:
        scheme = url.partition(":")[0] if ":" in url else url[:40]
        raise StoreUrlError(
            f"unsupported store URL ({scheme}:...); use sqlite:///PATH (a file here) or "
            "postgresql+psycopg://USER@HOST/DB")


def make_engine(url: str, pool_size: int = DEFAULT_POOL_SIZE) -> Engine:
    """An engine for `url`, keeping `pool_size` connections. SQLite gets WAL and
    synchronous=FULL, so an acknowledged intent survives a crash and a power cut, and BEGIN
    IMMEDIATE for transactions that write, so two writers never interleave. StoreUrlError for
    a URL of another database (the migrations and statements are written for these two)."""
    supported_store_url(url)
    if not url.startswith("sqlite"):
        # No pre-ping: it costs a round trip per transaction. A connection that died with a
        # server restart fails its transaction (a clear StoreUnavailableError, nothing half
        # written), and SQLAlchemy then drops the pool's stale connections.
        return create_engine(url, hide_parameters=True, **_pool(pool_size))
    in_memory = url in ("sqlite://", "sqlite:///:memory:")
    engine = create_engine(
        url,
        # An error's text then shows no bound values (keys, references, notes) wherever it
        # goes: logs, tracebacks, `cannot start`.
        hide_parameters=True,
        connect_args={"check_same_thread": False, "timeout": 30},
        **({"poolclass": StaticPool} if in_memory else _pool(pool_size)),
    )
    [filename], options = engine.dialect.create_connect_args(engine.url)
    if not in_memory and not options.get("uri"):
        _private_file(filename)
        _commit_only_to(engine, filename)

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
        # Straight to the driver: through SQLAlchemy's statement machinery this one constant
        # statement cost a third of recording an intent's CPU. A read transaction (the
        # store's READING option) begins deferred: under WAL it reads a snapshot and takes no
        # lock, so reads neither wait for the writer nor make it wait (a deferred transaction
        # that wrote could fail to upgrade its lock: only reads are begun so).
        begin = "BEGIN" if conn.get_execution_options().get(READING_OPTION) else "BEGIN IMMEDIATE"
        try:
            conn.connection.driver_connection.execute(begin)
        except sqlite3.OperationalError as exc:  # locked for longer than the busy timeout
            raise OperationalError(begin, None, exc) from exc

    return engine


def _private_file(path: str) -> None:
    """Create a new store file readable by its owner only (0600, whatever the umask). SQLite
    gives its -wal and -shm files the database file's permissions."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def _commit_only_to(engine: Engine, path: str) -> None:
    """Keep the engine on the file at `path`, the one a restart would open.

    A connection holds its file open: removed or replaced, the old file would keep taking
    commits that vanish with the process, answered 201 all the same. So a commit is refused
    (StoreUnavailableError, nothing recorded) unless `path` is still the file the connection
    opened, and such a connection is replaced at its next checkout. Once the file exists, new
    connections open it read-write only: a missing file is a store that is gone (503 until it
    is back), not a new empty one whose WAL could later be applied to the restored file; and an
    empty file or one that is not a database is a store that is gone too (left untouched), not
    an internal error.
    """
    opened = threading.Event()

    @event.listens_for(engine, "do_connect")
    def _existing_only(dialect: Any, record: Any, cargs: list[Any],
                       cparams: dict[str, Any]) -> None:
        if opened.is_set():
            cargs[0] = Path(path).as_uri() + "?mode=rw"
            cparams["uri"] = True

    @event.listens_for(engine, "connect")
    def _remember(dbapi_connection: Any, record: Any) -> None:
        try:
            version = dbapi_connection.execute("PRAGMA schema_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            # Another kind of file in its place: the store is not there, as when it is missing.
            raise sqlite3.OperationalError(f"{path}: {exc}") from None
        if version == 0 and opened.is_set():
            raise sqlite3.OperationalError(f"{path} is empty, not the receipt store")
        record.info["file_id"] = _file_id(path)
        opened.set()

    @event.listens_for(engine, "checkout")
    def _still_there(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if _file_id(path) != record.info.get("file_id"):
            raise DisconnectionError(f"{path} was removed or replaced")

    @event.listens_for(engine, "commit")
    def _commit_there(conn: Any) -> None:
        if _file_id(path) != conn.info.get("file_id"):
            raise StoreUnavailableError(
                f"receipt store unavailable: {path} was removed or replaced under the running "
                "service; nothing was recorded. Put the file back (with its -wal) or restart")


def alembic_config() -> Config:
    """The Alembic configuration for the store's migrations, usable without an ini file."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


#: Replicas started together on PostgreSQL take turns at the upgrade: the first migrates, the
#: others wait on this transaction-scoped advisory lock (one per schema), then find the schema
#: at head and do nothing. Without it they raced: UniqueViolation on alembic_version, or a
#: table created twice. (SQLite needs none: BEGIN IMMEDIATE already serialises writers.)
MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtext('reconciler-migrate:' || current_schema()))"


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration (a no-op when it is there already)."""
    config = alembic_config()
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.exec_driver_sql(MIGRATION_LOCK)
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def migrate(url: str) -> str:
    """Bring the store at `url` to the newest migration (`reconciler migrate`); its revision
    afterwards."""
    engine = make_engine(url)
    try:
        upgrade(engine)
        with engine.connect() as connection:
            revision = MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
    return revision or "(none)"


def open_store(url: str = DEFAULT_URL, *, pool_size: int = DEFAULT_POOL_SIZE,
               warm: bool = False) -> SqlStore:
    """Open (and migrate) the store at a SQLAlchemy URL; `warm`: open the pool's connections
    now, not on the first requests (a service about to take load)."""
    engine = make_engine(url, pool_size)
    upgrade(engine)
    if warm:
        warm_pool(engine, pool_size)
    return SqlStore(engine)


def warm_pool(engine: Engine, count: int) -> None:
    """Open `count` connections at once and return them to the pool, which keeps them."""
    with contextlib.ExitStack() as held:
        for _ in range(count):
            held.enter_context(engine.connect())
