"""Error messages a user meets (issue 33, item 8): each says what went wrong and what to do,
without a traceback."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from probes.errors import ProbeConfigError
from probes.mcp_read import mcp_read
from reconciler.cli import app
from reconciler.cli.configcheck import check_config

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


ROOT = Path(__file__).resolve().parents[1]
#: The top-level tables of a reconciler configuration file (a TOML block with none of them
#: is another tool's file, such as a package's pyproject.toml).
CONFIG_TABLES = ("[service]", "[providers.", "[[providers.", "[mcp_proxy]")
#: Documents whose blocks configure a probe package the docs describe but do not ship.
NOT_SHIPPED = {"docs/probe-packages.md": "its blocks configure acme.ledger, a third-party "
                                         "probe package written as an example"}


def shipped_configurations() -> list[tuple[str, str]]:
    """(where, TOML text) of every configuration the docs and examples ship."""
    found = [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
             for path in sorted((ROOT / "examples").glob("*.toml"))]
    for doc in sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]):
        where = str(doc.relative_to(ROOT))
        if where in NOT_SHIPPED:
            continue
        text = doc.read_text(encoding="utf-8")
        for block in re.finditer(r"^```toml\n(.*?)^```", text, re.S | re.M):
            if any(table in block.group(1) for table in CONFIG_TABLES):
                found.append((f"{where}:{text[:block.start()].count(chr(10)) + 2}",
                              block.group(1)))
    return found


@pytest.mark.parametrize(("where", "toml"), shipped_configurations(),
                         ids=[where for where, _ in shipped_configurations()])
def test_check_config_accepts_every_configuration_the_docs_ship(
        where: str, toml: str, tmp_path: Path) -> None:
    path = tmp_path / "reconciler.toml"
    path.write_text(toml, encoding="utf-8")
    # The variable docs/configuration.md's [service] table names for the sidecar's token.
    env = {**os.environ, "RECONCILER_SIDECAR_TOKEN": "t" * 40}
    report = check_config(path, env)
    assert report.errors == 0, [str(p) for p in report.problems]


def test_check_config_lists_every_mistake_of_a_table(tmp_path: Path) -> None:
    path = tmp_path / "reconciler.toml"
    path.write_text('[providers.pay]\nidempotency_keys = "yes"\nvisibility_lag_s = -5\n'
                    'colour = "blue"\n', encoding="utf-8")
    assert [p.message for p in check_config(path, {}).problems] == [
        "providers.pay: option 'visibility_lag_s' must not be negative",
        "providers.pay: option 'idempotency_keys' must be true or false",
        "providers.pay: unknown option(s): colour"]
