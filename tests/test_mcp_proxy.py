"""The reconciling MCP proxy in front of an upstream MCP server (the official `mcp` package,
in process): the upstream's tools re-exported, and a tools/call that times out after the
upstream applied it, or before."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer

from probes.mcp_read import mcp_read
from reconciler.client.effects import Recorder
from reconciler.domain import Effect
from reconciler.integrations.tool_calls import tool_operation
from reconciler.mcpproxy.proxy import KEY_META, ProxySettings, ReconcilingProxy, effect_of

from effect_harness import BACKENDS, PROVIDER, Provider, backend

ANSWER_LOST_AFTER_S = 2.0
SCOPE = "run-proxy"


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, provider: Provider,
          tmp_path: Path) -> Iterator[Recorder]:
    """Probed through the upstream's own read-only tool: the `mcp_read` probe kind."""
    server = upstream(provider)
    probe = mcp_read("payments.list_charges", {
        "tool": "list_charges", "arguments": {"order": "{correlation[order]}"},
        "items": "charges", "ref": "id", "authority": "authoritative"}, {},
        connect=lambda: Client(server))
    with backend(request.param, provider, tmp_path, probes=[probe]) as b:
        yield b


def upstream(provider: Provider, keys: list[object] | None = None) -> MCPServer:
    """Charges by order; the provider's faults decide whether a call charges, and a call
    whose answer is to be lost outlives the proxy's timeout. `keys` collects the idempotency
    key each charge request carried in its `_meta`."""
    server = MCPServer("payments")

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=False))
    async def charge(order: str, amount: int, ctx: Context) -> dict[str, Any]:
        if keys is not None:
            keys.append((ctx.request_context.meta or {}).get(KEY_META))
        lose = bool(provider.faults)
        try:
            result = provider.charge(f"order-{order}", amount)
        except TimeoutError:
            result = {}
        if lose:
            await anyio.sleep(ANSWER_LOST_AFTER_S)
        return result

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
    async def list_charges(order: str) -> dict[str, list[dict[str, str]]]:
        return {"charges": [{"id": ref, "order": order}
                            for ref in provider.refs(f"order-{order}")]}

    return server


@asynccontextmanager
async def proxied(provider: Provider, store: Recorder,
                  keys: list[object] | None = None) -> AsyncIterator[Client]:
    async with Client(upstream(provider, keys)) as up:
        settings = ProxySettings(PROVIDER, correlate={"charge": ["order"]}, call_timeout_s=0.3,
                                 scope=SCOPE)
        proxy = ReconcilingProxy(up, settings, store)
        async with Client(proxy.server()) as client:
            yield client


def text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def test_the_upstreams_tools_are_re_exported_with_their_classes(
        provider: Provider, store: Recorder) -> None:
    async def main() -> list[types.Tool]:
        async with proxied(provider, store) as client:
            return (await client.list_tools()).tools

    tools = {t.name: effect_of(t) for t in anyio.run(main)}
    assert tools == {"charge": Effect.NON_IDEMPOTENT, "list_charges": Effect.READ_ONLY}


def call_twice(provider: Provider, store: Recorder,
               keys: list[object] | None = None) -> tuple[str, str]:
    async def main() -> tuple[str, str]:
        async with proxied(provider, store, keys) as client:
            arguments = {"order": "A-17", "amount": 1200}
            first = await client.call_tool("charge", arguments)
            second = await client.call_tool("charge", arguments)
            return text(first), text(second)
    return anyio.run(main)


def test_a_timed_out_call_the_upstream_applied_is_not_forwarded_again(
        provider: Provider, store: Recorder) -> None:
    provider.faults = ["lose_response"]
    first, second = call_twice(provider, store)
    assert "charge: done (ch_1)" in first and "Do not call charge again" in first
    assert "charge: done (ch_1)" in second
    assert (provider.calls, len(provider.charges)) == (1, 1)


def test_a_timed_out_call_the_upstream_did_not_apply_is_forwarded_once_more(
        provider: Provider, store: Recorder) -> None:
    provider.faults = ["fail_before_commit"]
    first, second = call_twice(provider, store)
    assert "You may call charge again, once" in first
    assert "ch_1" in second
    assert (provider.calls, len(provider.charges)) == (2, 1)


def test_a_forwarded_call_and_its_granted_retry_carry_the_intents_idempotency_key(
        provider: Provider, store: Recorder) -> None:
    provider.faults = ["fail_before_commit"]
    keys: list[object] = []
    call_twice(provider, store, keys)
    key = tool_operation(SCOPE, "charge", {"order": "A-17", "amount": 1200})
    assert keys == [key, key]


def test_the_mcp_package_cannot_carry_sep_3182_yet() -> None:
    """SEP-3182's wire shape (docs/integrations/mcp.md): `params.idempotencyKey` and the
    server capability `tools.idempotency`. The installed `mcp` drops both; when it keeps them,
    the proxy should send the key there to upstreams that declare the capability."""
    params = types.CallToolRequestParams.model_validate(
        {"name": "charge", "arguments": {}, "idempotencyKey": "k"})
    capabilities = types.ServerCapabilities.model_validate({"tools": {"idempotency": {}}})
    assert "idempotencyKey" not in params.model_dump(by_alias=True)
    assert "idempotency" not in capabilities.model_dump(by_alias=True)["tools"]


def test_a_read_only_tool_is_forwarded_every_time(provider: Provider,
                                                  store: Recorder) -> None:
    async def main() -> list[str]:
        async with proxied(provider, store) as client:
            return [text(await client.call_tool("list_charges", {"order": "Z"}))
                    for _ in range(3)]

    assert len(anyio.run(main)) == 3 and provider.calls == 0
