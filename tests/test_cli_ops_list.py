"""`reconciler ops list`: the sidecar's operations filtered as GET /v1/operations filters them
(verdict, provider, whether a human must act), a page at a time, in 100 columns or as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli import app

from console_harness import Console, console_sidecar
from sidecar_client import TOKEN


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    path: Path = tmp_path_factory.mktemp("ops-list")
    with console_sidecar(path, duplicates=("dup",)) as running:
        yield running


def listed(console: Console, *args: str) -> str:
    # A terminal of the widest the tables take: the width a run under xdist inherits varies.
    result = CliRunner().invoke(app, ["ops", "list", *args], env={
        "RECONCILER_URL": console.url, "RECONCILER_TOKEN": TOKEN, "COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return result.output


def ids(console: Console, *args: str) -> list[str]:
    page = json.loads(listed(console, *args, "--json"))
    return [op["operation_id"] for op in page["items"]]


def test_the_list_is_every_operation_in_id_order(console: Console) -> None:
    everything = ids(console)
    assert {"dup", "late"} <= set(everything) and everything == sorted(everything)


def test_verdict_keeps_the_operations_with_that_verdict(console: Console) -> None:
    assert ids(console, "--verdict", "duplicate_effect") == ["dup"]


def test_provider_keeps_that_providers_operations(console: Console) -> None:
    assert ids(console, "--provider", "slow") == ["late"]


def test_escalated_keeps_what_a_human_must_act_on_and_not_escalated_the_rest(
        console: Console) -> None:
    assert "late" in ids(console, "--escalated")
    assert "late" not in ids(console, "--not-escalated")


def test_limit_pages_and_the_table_says_how_to_ask_for_the_next(console: Console) -> None:
    first, second, *_ = ids(console)
    out = listed(console, "--limit", "1")
    assert first in out and f"more: --after {first}" in out
    assert ids(console, "--limit", "1", "--after", first) == [second]


def test_the_table_fits_100_columns_and_shows_verdict_and_reason(console: Console) -> None:
    out = listed(console, "--provider", "slow")
    assert max(len(line) for line in out.splitlines()) <= 100
    row = next(line for line in out.splitlines() if line.startswith("late"))
    assert "indeterminate" in row and "escalate_to_human" in row


def test_a_bad_filter_is_refused_before_the_sidecar_is_asked() -> None:
    result = CliRunner().invoke(app, ["ops", "list", "--verdict", "maybe"],
                                env={"RECONCILER_URL": "http://127.0.0.1:9"})
    assert result.exit_code == 2 and "maybe" in result.output
