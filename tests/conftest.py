"""Shared fixtures. Test helpers (builders.py, databases.py) sit beside the tests and are
imported by module name: pytest puts this folder on sys.path."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from databases import pg_schema, pg_unreachable


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store URL on each backend (PostgreSQL skipped, with the reason, when it
    cannot be reached)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    reason = pg_unreachable()
    if reason:
        pytest.skip(reason)
    with pg_schema() as url:
        yield url
