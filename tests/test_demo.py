"""`reconciler demo` plays every scenario against the sandbox and gets the expected verdicts."""

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.demo import SCENARIOS


def test_demo_plays_every_scenario_as_expected_in_100_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # a wide terminal: the table still fits 100
    result = CliRunner().invoke(app, ["demo"])

    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    n = len(SCENARIOS)
    assert lines[-1] == f"{n} scenarios, {n} as expected"
    assert max(map(len, lines)) <= 100
    # A row per scenario (its cells wrap onto lines of their own), each saying "ok".
    assert sum(line.endswith("  ok") for line in lines) == n
    assert not any("DIFFERS" in line for line in lines)
