"""A CLI that answers at once: `reconciler --help` and `--version` import no web framework,
database toolkit, HTTP client or agent framework; each command imports what it uses when it
runs (bench/cli.py measures the CPU they take)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from reconciler.cli import _Root, app
from reconciler.core.schedule import DEFAULT_POLICY

#: Packages a command imports when it runs, never to show help or the version.
HEAVY = ("fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "httpx",
         "pydantic", "rich", "jinja2", "openai", "agents", "anthropic", "langgraph",
         "langchain_core", "pydantic_ai", "mcp", "dbos", "temporalio", "prometheus_client")
MARK = "--- modules ---"
#: Runs the command line as `reconciler ARGS` does, then lists the modules it imported.
PROGRAM = f"""
import sys
from reconciler.cli import app
try:
    app(sys.argv[1:], prog_name="reconciler")
except SystemExit:
    pass
print({MARK!r})
print("\\n".join(sorted(sys.modules)))
"""


def imported_by(*args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROGRAM, *args], capture_output=True,
                          text=True, timeout=120, check=True)
    output, _, modules = done.stdout.partition(MARK)
    assert "reconciler" in output + done.stderr, done.stdout + done.stderr
    return {name.split(".")[0] for name in modules.split()}


@pytest.mark.parametrize("args", [("--help",), ("--version",), ()], ids=" ".join)
def test_help_and_version_import_no_framework(args: tuple[str, ...]) -> None:
    assert not set(HEAVY) & imported_by(*args)


def test_the_root_lists_a_lazy_group_with_the_help_the_group_has() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, _Root)
    for name, (listed, load) in _Root.LAZY.items():
        assert typer.main.get_group(load()).help == listed, name


def test_a_lazy_group_is_loaded_to_run_its_commands() -> None:
    shown = CliRunner().invoke(app, ["ops", "--help"], prog_name="reconciler")
    assert shown.exit_code == 0, shown.output
    assert "Usage: reconciler ops" in shown.stdout
    assert "queue" in shown.stdout and "list" in shown.stdout


def test_serve_help_names_the_probe_policys_defaults() -> None:
    shown = CliRunner().invoke(app, ["serve", "--help"], prog_name="reconciler",
                               env={"COLUMNS": "200"}).stdout
    assert "{policy." not in shown
    for default in (f"[default {DEFAULT_POLICY.concurrency}]",
                    f"[default {DEFAULT_POLICY.probe_timeout_s:g}]",
                    f"[default {DEFAULT_POLICY.probe_budget}]"):
        assert default in shown, default
