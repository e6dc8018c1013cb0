"""Error messages a user meets (issue 33, item 8): each says what went wrong and what to do,
without a traceback."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from probes.errors import ProbeConfigError
from probes.mcp_read import mcp_read
from reconciler.cli import app

from sidecar_client import Sidecar, assert_problem

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


@pytest.mark.parametrize(("path", "body", "allowed"), [
    ("resolution", {"verdict": "duplicate_effect", "note": "n"},
     "Input should be 'verified_applied' or 'verified_not_applied'"),
    ("evidence", {"kind": "observation", "probe": "p", "authority": "sure"},
     "Input should be 'authoritative', 'lagging', 'weak' or 'unavailable'"),
])
def test_a_422_names_the_values_a_client_sends_not_python_enums(
        sidecar: Sidecar, path: str, body: dict[str, str], allowed: str) -> None:
    sidecar.intent("op")
    problem = assert_problem(sidecar.http.post(f"/v1/operations/op/{path}", json=body), 422,
                             "validation")
    assert [e["msg"] for e in problem["errors"]] == [allowed]


def test_the_mcp_read_probe_without_the_mcp_extra_names_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if not installed: importing it fails
    with pytest.raises(ProbeConfigError) as raised:
        mcp_read("chat.lookup", {"command": "chat-mcp-server", "tool": "list_messages",
                                 "ref": "id"}, {})
    assert str(raised.value) == (
        "probe 'chat.lookup': the mcp_read probe needs the MCP client, an optional extra: "
        "pip install 'effect-reconciler[mcp]'")
