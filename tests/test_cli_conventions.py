"""The conventions an operator expects of a command line: `--version`, `-h` wherever `--help`
is, shell completion, `reconciler migrate`, and logs as text or JSON lines at a level, with
probe HTTP calls at DEBUG and never a credential."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from alembic.script import ScriptDirectory
from typer.core import TyperGroup
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.infra.logs import configure
from reconciler.infra.release import release
from reconciler.store.schema import alembic_config

from service_harness import serving_process

runner = CliRunner()


def command_paths(group: TyperGroup, prefix: tuple[str, ...] = ()
                  ) -> Iterator[tuple[str, ...]]:
    """Every command and group, those of groups loaded when used (`ops`) included."""
    ctx = typer.Context(group)
    for name in group.list_commands(ctx):
        yield (*prefix, name)
        command = group.get_command(ctx, name)
        if isinstance(command, TyperGroup):
            yield from command_paths(command, (*prefix, name))


ROOT = typer.main.get_command(app)
assert isinstance(ROOT, TyperGroup)
COMMANDS = [(), *command_paths(ROOT)]


def test_version_prints_the_release() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"reconciler {release()}\n"


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "reconciler")
def test_h_is_help_on_every_command(path: tuple[str, ...]) -> None:
    short = runner.invoke(app, [*path, "-h"], prog_name="reconciler")
    assert short.exit_code == 0, short.output
    assert short.stdout == runner.invoke(app, [*path, "--help"], prog_name="reconciler").stdout
    assert "-h, --help" in short.stdout


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "reconciler")
def test_help_names_arguments_and_values_by_clean_metavars(path: tuple[str, ...]) -> None:
    shown = runner.invoke(app, [*path, "--help"], prog_name="reconciler").stdout
    usage = shown.splitlines()[0]
    assert "{" not in usage, usage
    assert "<list[" not in shown and "... <" not in shown, shown


def test_shell_completion_is_offered_and_completes_commands() -> None:
    shown = runner.invoke(app, ["--show-completion", "bash"], prog_name="reconciler")
    assert shown.exit_code == 0 and "_RECONCILER_COMPLETE=complete_bash" in shown.stdout
    completed = runner.invoke(app, [], prog_name="reconciler", env={
        "_RECONCILER_COMPLETE": "complete_bash", "COMP_WORDS": "reconciler mi",
        "COMP_CWORD": "1"})
    assert completed.stdout.split() == ["migrate"]


def test_migrate_brings_an_empty_store_to_the_newest_revision_and_says_which(
        tmp_path: Path) -> None:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    url = f"sqlite:///{tmp_path / 'new.db'}"
    for _ in range(2):  # the second run finds it there and changes nothing
        result = runner.invoke(app, ["migrate", "--db", url])
        assert result.exit_code == 0, result.output
        assert result.stdout == f"{url}: at revision {head}\n"


def test_migrate_on_a_store_it_cannot_reach_exits_2_without_a_traceback() -> None:
    result = runner.invoke(app, ["migrate", "--db",
                                 "postgresql+psycopg://nobody:s3cret@127.0.0.1:1/none"])
    assert result.exit_code == 2
    assert "cannot migrate" in result.stderr and "Traceback" not in result.output
    assert "s3cret" not in result.output + result.stderr


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    """What `reconciler.infra.logs.configure` writes for the test's duration (then unconfigured)."""
    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    yield stream
    for handler in [h for h in root.handlers if h.get_name() == "reconciler"]:
        root.removeHandler(handler)
    root.setLevel(level)


def configured(stream: io.StringIO, level: str, fmt: str) -> None:
    configure(level, fmt)
    [handler] = [h for h in logging.getLogger().handlers if h.get_name() == "reconciler"]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)


def test_json_logs_are_one_object_per_line_with_the_extra_fields_and_no_secret(
        logged: io.StringIO) -> None:
    configured(logged, "info", "json")
    logging.getLogger("reconciler.test").info("swept %d", 3, extra={
        "operations": 3, "api_token": "sk_live_abc"})
    logging.getLogger("reconciler.test").debug("not at info")
    [line] = logged.getvalue().splitlines()
    record = json.loads(line)
    assert {k: record[k] for k in ("level", "logger", "message", "operations")} == {
        "level": "INFO", "logger": "reconciler.test", "message": "swept 3", "operations": 3}
    assert record["time"].endswith("+00:00") and record["api_token"] == "***"
    assert "sk_live_abc" not in logged.getvalue()


def test_uvicorns_coloured_copy_of_a_message_is_not_logged_as_a_field(
        logged: io.StringIO) -> None:
    configured(logged, "info", "text")
    # uvicorn logs it so (uvicorn.server); a logger of ours, since running uvicorn in another
    # test reconfigures uvicorn's loggers for the rest of the worker.
    logging.getLogger("reconciler.test").info("Started server process [%d]", 7, extra={
        "color_message": "Started server process [\x1b[36m%d\x1b[0m]"})
    assert logged.getvalue().rstrip().endswith("reconciler.test: Started server process [7]")


def http_call(url: str) -> None:
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as http:
        http.get(url)


def test_probe_http_calls_are_logged_at_debug_not_info(logged: io.StringIO) -> None:
    configured(logged, "info", "text")
    http_call("https://api.example.test/v1/charges?limit=1")
    assert logged.getvalue() == ""
    configured(logged, "debug", "text")
    http_call("https://user:pw@api.example.test/v1/charges?api_key=sk_live_abc")
    [line] = [ln for ln in logged.getvalue().splitlines() if "HTTP Request" in ln]
    assert " DEBUG httpx: HTTP Request: GET https://api.example.test/v1/charges " in line
    assert "sk_live_abc" not in logged.getvalue() and "pw@" not in logged.getvalue()


def json_records_of_a_healthz_call(tmp_path: Path, **env: str) -> list[dict[str, Any]]:
    """The JSON log records a real `serve` writes after `serving on` around one /healthz."""
    env = {"RECONCILER_DB": f"sqlite:///{tmp_path / 'r.db'}", "RECONCILER_LOG_FORMAT": "json",
           "RECONCILER_SWEEP_INTERVAL_S": "0", **env}
    with serving_process(env) as service:
        assert httpx.get(f"{service.url}/healthz", timeout=10).status_code == 200
        service.stop()
    logs = service.output[next(n for n, line in enumerate(service.output)
                               if line.startswith("serving on ")) + 1:]
    return [json.loads(line) for line in logs]


def test_serve_logs_json_lines_when_asked(tmp_path: Path) -> None:
    records = json_records_of_a_healthz_call(tmp_path)
    assert any(r["logger"] == "reconciler.access" and "/healthz" in r["message"] for r in records)
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)


def test_serve_writes_no_access_lines_with_the_access_log_off(tmp_path: Path) -> None:
    loggers = {r["logger"] for r in
               json_records_of_a_healthz_call(tmp_path, RECONCILER_ACCESS_LOG="false")}
    assert "reconciler.access" not in loggers
    assert "uvicorn.error" in loggers  # the rest of uvicorn's logging is unchanged
