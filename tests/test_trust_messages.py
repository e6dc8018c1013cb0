"""Error messages a user meets (issue 33, item 8): each says what went wrong and what to do,
without a traceback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from reconciler.cli import app

runner = CliRunner()

MYSQL = "mysql://app@db.internal/receipts"


@pytest.mark.parametrize("command", [
    ["serve", "--db", MYSQL],
    ["migrate", "--db", MYSQL],
    ["prune", "--settled-before", "30d", "--db", MYSQL],
    ["check-config", "/dev/null", "--db", MYSQL],
])
def test_a_store_url_of_another_database_names_the_ones_supported(command: list[str]) -> None:
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    assert "unsupported store URL (mysql:...); use sqlite:///PATH" in result.output
    assert "postgresql+psycopg://" in result.output
    assert isinstance(result.exception, SystemExit)  # an exit, not an exception raised
