"""What `pip install .` installs is enough to serve: the Quickstart's first command."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def base_requirements() -> set[str]:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower()  # type: ignore[union-attr]
            for r in project["dependencies"]}


def test_greenlet_is_installed_without_extras() -> None:
    # The SQLite hot routes run the ledger in a greenlet (service.loop_calls, service.wiring):
    # SQLAlchemy imports greenlet only when first needed, and SQLAlchemy 2.1 no longer installs
    # it: with greenlet only in the test extras, `pip install .` served 500s on every POST of
    # a hot route while the test suite passed.
    assert "greenlet" in base_requirements()
