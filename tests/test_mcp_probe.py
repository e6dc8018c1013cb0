"""The `mcp_read` probe kind against an in-process MCP server (the official `mcp` package)."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from probes.base import ProbeTarget
from probes.errors import ProbeConfigError
from probes.mcp_read import mcp_read
from probes.registry import default_registry
from reconciler.domain import Authority, Match, Observation

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


def test_the_kind_is_registered_and_checks_its_options() -> None:
    with pytest.raises(ProbeConfigError, match="url"):
        default_registry().build("mcp_read", {"tool": "t", "ref": "id"}, {})
