"""`reconciler demo` plays every scenario against the sandbox and gets the expected verdicts."""

from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.demo import SCENARIOS


def test_demo_plays_every_scenario_as_expected() -> None:
    result = CliRunner().invoke(app, ["demo"])

    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    n = len(SCENARIOS)
    assert lines[-1] == f"{n} scenarios, {n} as expected"
    assert len(lines) == n + 2  # the header, one row per scenario, the closing line
    assert not any("DIFFERS" in line for line in lines)
