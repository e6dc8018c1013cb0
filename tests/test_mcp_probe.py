"""The `mcp_read` probe kind against an in-process MCP server (the official `mcp` package), and
against one it starts as a process (mcp_token_upstream.py, which needs its token)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from probes.base import ProbeTarget
from probes.errors import ProbeConfigError
from probes.mcp_read import mcp_read
from probes.registry import default_registry
from reconciler.core.domain import Authority, Match, Observation

TARGET = ProbeTarget("op-1", "key-1", "chat", "send", "sha256:" + "0" * 64,
                     {"channel": "C1"})


def server(messages: list[dict[str, Any]], fail: bool = False) -> MCPServer:
    chat = MCPServer("chat")

    @chat.tool()
    async def list_messages(channel: str) -> dict[str, Any]:
        if fail:
            raise RuntimeError("backend down")
        return {"messages": [m for m in messages if m["channel"] == channel]}

    return chat


def probe(chat: MCPServer, **options: Any) -> Any:
    return mcp_read("chat.list_messages", {
        "tool": "list_messages", "arguments": {"channel": "{correlation[channel]}"},
        "items": "messages", "ref": "ts", "where": {"op": "{operation_id}"}, **options}, {},
        connect=lambda: Client(chat))


def observed(result: object) -> Observation:
    assert isinstance(result, Observation)
    return result


def test_the_operations_items_are_its_matches() -> None:
    chat = server([{"channel": "C1", "ts": "1.1", "op": "op-1"},
                   {"channel": "C1", "ts": "1.2", "op": "op-2"}])
    seen = observed(probe(chat).probe(TARGET))
    assert (seen.authority, seen.matches) == (Authority.LAGGING, (Match("1.1"),))


def test_a_tool_error_is_unavailable() -> None:
    seen = observed(probe(server([], fail=True)).probe(TARGET))
    assert seen.authority is Authority.UNAVAILABLE and seen.error


def test_a_missing_correlation_is_unavailable() -> None:
    target = ProbeTarget("op-1", None, "chat", "send", TARGET.request_hash)
    seen = observed(probe(server([])).probe(target))
    assert seen.authority is Authority.UNAVAILABLE and "channel" in (seen.error or "")


def test_a_full_page_without_a_match_proves_no_zero() -> None:
    chat = server([{"channel": "C1", "ts": "1.2", "op": "op-2"}])
    assert observed(probe(chat, page_size=1).probe(TARGET)).authority is Authority.UNAVAILABLE


UPSTREAM = Path(__file__).with_name("mcp_token_upstream.py")


def started(tmp_path: Path, env: dict[str, str], **options: Any) -> Observation:
    """The probe's read of order A-17, through a server it starts with `command`."""
    charges = tmp_path / "charges"
    charges.write_text(json.dumps({"id": "ch_1", "order": "A-17", "key": None}) + "\n")
    target = ProbeTarget("op-1", None, "payments", "charge", TARGET.request_hash,
                         {"order": "A-17"})
    return observed(default_registry().build("mcp_read", {
        "command": sys.executable, "args": [str(UPSTREAM), str(charges)],
        "tool": "list_charges", "arguments": {"order": "{correlation[order]}"},
        "items": "charges", "ref": "id", "authority": "authoritative", **options},
        env).probe(target))


def test_the_server_starts_with_the_environment_the_probe_was_given(tmp_path: Path) -> None:
    seen = started(tmp_path, {**os.environ, "PAYMENTS_TOKEN": "tok_test"})
    assert (seen.authority, seen.matches) == (Authority.AUTHORITATIVE, (Match("ch_1"),))


def test_pass_env_starts_the_server_with_only_the_named_variables(tmp_path: Path) -> None:
    env = {"PAYMENTS_TOKEN": "tok_test", "PAYMENTS_OTHER": "x"}
    assert started(tmp_path, env, pass_env=["PAYMENTS_TOKEN"]).matches == (Match("ch_1"),)
    without = started(tmp_path, env, pass_env=["PAYMENTS_OTHER"])
    assert without.authority is Authority.UNAVAILABLE  # the server died without its token


def test_a_named_variable_that_is_not_set_is_unavailable_with_its_name(
        tmp_path: Path) -> None:
    seen = started(tmp_path, {"PAYMENTS_TOKEN": "t"}, pass_env=["PAYMENTS_MISSING"])
    assert seen.authority is Authority.UNAVAILABLE and "PAYMENTS_MISSING" in (seen.error or "")


def test_the_kind_is_registered_and_checks_its_options() -> None:
    with pytest.raises(ProbeConfigError, match="url"):
        default_registry().build("mcp_read", {"tool": "t", "ref": "id"}, {})
