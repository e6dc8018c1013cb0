"""The benchmarks' seed cache (bench/seeds.py): a large store's bulk is seeded once and copied
afterwards while the schema, the seeder and the seed's parameters are unchanged; a change of
any of them seeds afresh."""

import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import func, select

# bench/ is run from the repository root and is not installed with the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import seeds
from bench.operations import table_of
from reconciler.store.schema import alembic_config, open_store
from reconciler.store.tables import IntentRow, StateRow


def counts(url: str) -> tuple[int, int]:
    store = open_store(url)
    try:
        with store.engine.connect() as conn:
            return (conn.scalar(select(func.count()).select_from(table_of(IntentRow))) or 0,
                    conn.scalar(select(func.count()).select_from(table_of(StateRow))) or 0)
    finally:
        store.engine.dispose()


@pytest.fixture
def seedings(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Every bulk seeding done (url, settled, never-dispatched)."""
    done: list[tuple[str, int, int]] = []
    real = seeds.bulk

    def counted(url: str, prefix: str, settled: int, never: int = 0) -> None:
        done.append((url, settled, never))
        real(url, prefix, settled, never)

    monkeypatch.setattr(seeds, "bulk", counted)
    return done


def test_a_store_seeded_once_is_copied_the_next_time(
        tmp_path: Path, seedings: list[tuple[str, int, int]]) -> None:
    cache = tmp_path / "cache"
    first = seeds.bulk_sqlite(cache, tmp_path / "a.db", "p", 40, 5)
    second = seeds.bulk_sqlite(cache, tmp_path / "b.db", "p", 40, 5)
    assert len(seedings) == 1
    assert len(list(cache.glob("bulk-*.db"))) == 1
    assert counts(first) == counts(second) == (45, 45)


def test_other_parameters_seed_afresh(tmp_path: Path,
                                      seedings: list[tuple[str, int, int]]) -> None:
    cache = tmp_path / "cache"
    seeds.bulk_sqlite(cache, tmp_path / "a.db", "p", 40)
    url = seeds.bulk_sqlite(cache, tmp_path / "b.db", "p", 30)
    assert [settled for _, settled, _ in seedings] == [40, 30]
    assert counts(url) == (30, 30)


def test_a_changed_schema_seeds_afresh(tmp_path: Path, seedings: list[tuple[str, int, int]],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    seeds.bulk_sqlite(cache, tmp_path / "a.db", "p", 20)
    monkeypatch.setattr(seeds, "schema_key", lambda: "9999_another_head-0")
    seeds.bulk_sqlite(cache, tmp_path / "b.db", "p", 20)
    assert len(seedings) == 2
    assert len(list(cache.glob("bulk-*.db"))) == 2


def test_the_schema_key_names_the_migration_head() -> None:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert seeds.schema_key().startswith(f"{head}-")


def test_without_a_cache_nothing_is_kept(tmp_path: Path,
                                         seedings: list[tuple[str, int, int]]) -> None:
    seeds.bulk_sqlite(None, tmp_path / "a.db", "p", 20)
    seeds.bulk_sqlite(None, tmp_path / "b.db", "p", 20)
    assert len(seedings) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db", "b.db"]
