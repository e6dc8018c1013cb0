"""The `cli` benchmark (bench/cli.py) runs end to end at a tiny size: it times `reconciler
--help`, `--version` and the bare interpreter, and hands back a ratio for each command. No
timing is asserted here; the benchmark reports the figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# bench/ is run from the repository root and is not installed with the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import cli
from bench.harness import BenchError, Context


def test_the_cli_benchmark_measures_help_and_version_against_the_bare_interpreter(
        tmp_path: Path) -> None:
    outcome = cli.run(Context("tiny", tmp_path, ""))
    assert [r.name for r in outcome.ratios] == ["reconciler --help CPU, median",
                                                "reconciler --version CPU, median"]
    assert all(0 < r.value < 30 and r.target == cli.TARGET_S for r in outcome.ratios)
    assert [f.split(":")[0] for f in outcome.figures] == [
        "python -c pass", "reconciler --help", "reconciler --version"]


def test_a_command_that_fails_is_an_error_not_a_figure() -> None:
    with pytest.raises(BenchError, match="exited 3"):
        cli.cpu_of([sys.executable, "-c", "raise SystemExit(3)"])
