"""A first start logs one line per migration it runs: the revision and the first line of its
docstring, not the docstring's paragraph."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from reconciler.store.schema import alembic_config, migrate


def test_each_migration_run_is_logged_in_one_line_with_its_revision(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="alembic.runtime.migration")
    migrate(f"sqlite:///{tmp_path / 'fresh.db'}")
    running = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Running ")]
    scripts = list(ScriptDirectory.from_config(alembic_config()).walk_revisions())
    assert len(running) == len(scripts)
    for script in scripts:
        [line] = [m for m in running if f"-> {script.revision}," in m]
        first = script.doc.strip().splitlines()[0]
        assert "\n" not in line and line.partition(", ")[2].removesuffix(" ...") == first
