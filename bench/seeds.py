"""Seeded stores kept between runs: the bulk of a large store (100,000 to 1,000,000 settled or
never-dispatched operations) is seeded once and copied afterwards, SQLite's from a file in the
cache directory, PostgreSQL's from a schema kept in PostgreSQL itself.

Seeding took most of a quick run on a loaded machine (290 s of 11 minutes, issue 35), and
what it writes is the same every time: operations whose rows do not depend on when they were
written (settled ones are verified_applied with nothing due; never-dispatched ones have
nothing due either). The cache is keyed by everything that decides those rows: the migration
head and the migrations' text (the tables), the text of bench/operations.py and
reconciler/store/rows.py (the rows the `Seeder` writes) and the seed's parameters. Any of
them changed, the key changes and the store is seeded afresh. What does depend on the time
(the due operations a sweep or a claim picks up, whose deadlines run from their attempt) is
written on the copy by each run, as before.

    cache/bulk-<key>.db ── copy ──▶ workdir/<store>.db ── + due operations ──▶ measured
    schema bench_seed_<key> ── INSERT ... SELECT ──▶ fresh schema ── + due ──▶ measured

PostgreSQL's copy is made on every run, the first included (it seeds the kept schema, then
copies it): the measured store is always fresh tables of the migrated schema holding freshly
inserted rows, made the same way whether the seed was kept or not.

The cache directory: `--seed-cache DIR`, else `$RECONCILER_BENCH_CACHE`, else
`~/.cache/reconciler-bench`; `--no-seed-cache` seeds every store afresh (PostgreSQL's
straight into the measured schema, as before).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine
from sqlalchemy.pool import NullPool
from sqlmodel import SQLModel

from bench import operations
from bench.harness import BenchError, progress
from bench.operations import CONTRACT, Seeder, ids, in_schema, pg_schema
from reconciler.store import rows
from reconciler.store.schema import alembic_config, open_store

#: The prefix of the schemas that keep PostgreSQL's seeded rows between runs.
KEPT = "bench_seed_"

DEFAULT_CACHE = Path(os.environ.get("RECONCILER_BENCH_CACHE",
                                    Path.home() / ".cache" / "reconciler-bench"))


def schema_key() -> str:
    """What decides a seeded store's rows apart from its parameters: the migration head, the
    migrations' text, and the text of the seeder and of the store's rows it writes."""
    scripts = ScriptDirectory.from_config(alembic_config())
    digest = hashlib.sha256()
    for path in sorted(Path(scripts.versions).glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    for module in (operations, rows):  # the seeder, and the rows it takes from the store
        digest.update(Path(module.__file__ or "").read_bytes())
    return f"{scripts.get_current_head()}-{digest.hexdigest()[:16]}"


def bulk(url: str, prefix: str, settled: int, never: int = 0) -> None:
    """Seed the store at `url` with the part of a large store that does not depend on the
    time: `settled` operations `{prefix}-s-N` and `never` never dispatched `{prefix}-n-N`."""
    store = open_store(url)
    try:
        store.put_contract(CONTRACT)
        seeder = Seeder(store.engine)
        seeder.settled(ids(f"{prefix}-s", settled))
        if never:
            seeder.undispatched(ids(f"{prefix}-n", never))
    finally:
        store.engine.dispose()


def seed_key(prefix: str, settled: int, never: int) -> tuple[str, str]:
    """A seed's parameters (as JSON) and its key: the parameters and `schema_key`."""
    parameters = json.dumps({"prefix": prefix, "settled": settled, "never": never},
                            sort_keys=True)
    return parameters, hashlib.sha256(f"{schema_key()}|{parameters}".encode()).hexdigest()[:20]


def bulk_sqlite(cache: Path | None, path: Path, prefix: str, settled: int,
                never: int = 0) -> str:
    """`bulk` into the SQLite file at `path`: copied from the cache when a store seeded with
    the same parameters under the same schema is there, else seeded now and then kept there.
    `cache` None: seeded now, nothing kept. Its URL."""
    url = f"sqlite:///{path}"
    if cache is None:
        bulk(url, prefix, settled, never)
        return url
    parameters, key = seed_key(prefix, settled, never)
    kept = cache / f"bulk-{key}.db"
    if kept.exists():
        progress(f"copying the seeded store {kept} ({parameters})")
        shutil.copyfile(kept, path)
        return url
    bulk(url, prefix, settled, never)
    settle(path)
    cache.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(f".{os.getpid()}.partial")
    shutil.copyfile(path, partial)
    partial.replace(kept)  # whole or not at all: a run stopped mid-copy leaves no bad store
    progress(f"kept the seeded store as {kept} for the next runs")
    return url


def settle(path: Path) -> None:
    """Everything in the main file, no WAL beside it: the file alone is the whole store."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


@contextmanager
def bulk_postgres(cached: bool, pg_url: str, prefix: str, settled: int,
                  never: int = 0) -> Iterator[str]:
    """`bulk` in a fresh schema of the PostgreSQL at `pg_url` (`pg_schema`: dropped
    afterwards); its URL. `cached`: the rows are copied inside PostgreSQL from the schema kept
    there under the seed's key (`kept_schema`, seeded first if it is not there), else written
    by `bulk` now."""
    with pg_schema(pg_url) as url:
        if cached:
            copy_rows(kept_schema(pg_url, prefix, settled, never), url)
        else:
            bulk(url, prefix, settled, never)
        yield url


def kept_schema(pg_url: str, prefix: str, settled: int, never: int) -> str:
    """The schema `bench_seed_<key>` holding `bulk`'s rows for these parameters under this
    schema (`seed_key`), seeded (and vacuumed) now if missing or incomplete. Its comment says
    what it holds once seeding finished (`seeding|...` until then); kept seeds of other code
    (another `schema_key`) are dropped when a seed is made. An advisory lock on the name keeps
    two runs from seeding it at once."""
    parameters, key = seed_key(prefix, settled, never)
    name, done = f"{KEPT}{key}", f"{schema_key()}|{parameters}"
    admin = create_engine(pg_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql("SELECT pg_advisory_lock(hashtext(%s))", (name,))
            try:
                kept = {str(schema): str(comment) for schema, comment in conn.exec_driver_sql(
                    "SELECT nspname, coalesce(obj_description(oid, 'pg_namespace'), '') "
                    "FROM pg_namespace WHERE starts_with(nspname, %s)", (KEPT,))}
                if kept.get(name) == done:
                    progress(f"copying the seeded rows kept in PostgreSQL's schema {name} "
                             f"({parameters})")
                    return name
                for stale, comment in kept.items():
                    if stale == name or schema_key() not in comment:
                        conn.exec_driver_sql(f'DROP SCHEMA "{stale}" CASCADE')
                conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
                _comment(conn, name, f"seeding|{done}")
                bulk(in_schema(pg_url, name), prefix, settled, never)
                # Vacuumed now, not by autovacuum in the middle of a measurement: the kept
                # tables are only read from afterwards, and reading them sets no hint bits.
                for (table,) in conn.exec_driver_sql(
                        "SELECT table_name FROM information_schema.tables "
                        "WHERE table_schema = %s", (name,)):
                    conn.exec_driver_sql(f'VACUUM (ANALYZE) "{name}"."{table}"')
                _comment(conn, name, done)
                progress(f"kept the seeded rows in PostgreSQL's schema {name} for the next runs")
                return name
            finally:
                conn.exec_driver_sql("SELECT pg_advisory_unlock(hashtext(%s))", (name,))
    finally:
        admin.dispose()


def copy_rows(kept: str, url: str) -> None:
    """Migrate the store at `url` as any store is, then copy every table's rows from the
    schema `kept` into it inside PostgreSQL, as fresh inserts in the store's own tables (and
    move its id sequences past the copied ids): what `bulk` would have written, in a fraction
    of the time."""
    store = open_store(url)
    try:
        with store.engine.begin() as conn:
            present = set(conn.exec_driver_sql(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (kept,)).scalars()) - {"alembic_version"}
            tables = [t.name for t in SQLModel.metadata.sorted_tables if t.name in present]
            if set(tables) != present:
                raise BenchError(f"tables of the kept seed {kept} that the store's models do "
                                 f"not name: {sorted(present - set(tables))}")
            for table in tables:  # parents before children: the foreign keys hold throughout
                conn.exec_driver_sql(f'INSERT INTO "{table}" SELECT * FROM "{kept}"."{table}"')
            for table, column in conn.exec_driver_sql(
                    "SELECT table_name, column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() "
                    "AND (column_default LIKE %s OR is_identity = 'YES')", ("nextval(%",)):
                conn.exec_driver_sql(
                    f'SELECT setval(pg_get_serial_sequence(%s, %s), '
                    f'coalesce(max("{column}"), 0) + 1, false) FROM "{table}"', (table, column))
    finally:
        store.engine.dispose()


def _comment(conn: Connection, schema: str, text: str) -> None:
    quoted = text.replace("'", "''")
    conn.exec_driver_sql(f"COMMENT ON SCHEMA \"{schema}\" IS '{quoted}'")
