"""Seeded SQLite stores kept between runs: the bulk of a large store (100,000 to 1,000,000
settled or never-dispatched operations) is seeded once and copied from the cache afterwards.

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

The cache directory: `--seed-cache DIR`, else `$RECONCILER_BENCH_CACHE`, else
`~/.cache/reconciler-bench`; `--no-seed-cache` seeds every store afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

from alembic.script import ScriptDirectory

from bench import operations
from bench.harness import progress
from bench.operations import CONTRACT, Seeder, ids
from reconciler.store import rows
from reconciler.store.schema import alembic_config, open_store

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


def bulk_sqlite(cache: Path | None, path: Path, prefix: str, settled: int,
                never: int = 0) -> str:
    """`bulk` into the SQLite file at `path`: copied from the cache when a store seeded with
    the same parameters under the same schema is there, else seeded now and then kept there.
    `cache` None: seeded now, nothing kept. Its URL."""
    url = f"sqlite:///{path}"
    if cache is None:
        bulk(url, prefix, settled, never)
        return url
    parameters = json.dumps({"prefix": prefix, "settled": settled, "never": never},
                            sort_keys=True)
    key = hashlib.sha256(f"{schema_key()}|{parameters}".encode()).hexdigest()[:20]
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
