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
from reconciler.core.domain import Carried, Effect
from reconciler.core.sight import Sight
from reconciler.integrations.tool_calls import tool_operation
from reconciler.mcpproxy.proxy import (
    KEY_META,
    OPERATION_META,
    ProxySettings,
    ReconcilingProxy,
    effect_of,
)

from effect_harness import BACKENDS, PROVIDER, Provider, backend

ANSWER_LOST_AFTER_S = 2.0
SCOPE = "run-proxy"


@pytest.fixture(params=BACKENDS)
def recorder(request: pytest.FixtureRequest, provider: Provider,
          tmp_path: Path) -> Iterator[Recorder]:
    """Probed through the upstream's own read-only tool: the `mcp_read` probe kind, which
    finds a charge by the idempotency key it was made under."""
    server = upstream(provider)
    probe = mcp_read("payments.list_charges", {
        "tool": "list_charges", "items": "charges", "ref": "id",
        "where": {"key": "{idempotency_key}"}, "authority": "authoritative"}, {},
        connect=lambda: Client(server))
    probe.sight = Sight(frozenset({"charge"}), frozenset({Carried.IDEMPOTENCY_KEY}))
    with backend(request.param, provider, tmp_path, probes=[probe]) as b:
        yield b


def upstream(provider: Provider, metas: list[dict[str, Any]] | None = None) -> MCPServer:
    """Charges under the idempotency key a call carries in its `_meta` (sent on to the
    provider), else under its order; the provider's faults decide whether a call charges, and
    a call whose answer is to be lost outlives the proxy's timeout. `metas` collects the
    reconciler's entries of each charge request's `_meta`."""
    server = MCPServer("payments")

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=False))
    async def charge(order: str, amount: int, ctx: Context) -> dict[str, Any]:
        meta = ctx.request_context.meta or {}
        key = meta.get(KEY_META)
        if metas is not None:
            metas.append({k: v for k, v in meta.items() if k in (KEY_META, OPERATION_META)})
        lose = bool(provider.faults)
        try:
            result = provider.charge(key if isinstance(key, str) else f"order-{order}", amount)
        except TimeoutError:
            result = {}
        if lose:
            await anyio.sleep(ANSWER_LOST_AFTER_S)
        return result

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
    async def list_charges() -> dict[str, list[dict[str, str]]]:
        return {"charges": [{"id": ref, "key": key} for key, ref in provider.charges]}

    return server


@asynccontextmanager
async def proxied(provider: Provider, recorder: Recorder,
                  metas: list[dict[str, Any]] | None = None, keyed: bool = False,
                  tagged: bool = False) -> AsyncIterator[Client]:
    """`keyed`, `tagged`: the configuration says `charge` sends the key on to the provider,
    and attaches the operation id."""
    async with Client(upstream(provider, metas)) as up:
        settings = ProxySettings(PROVIDER, call_timeout_s=0.3, scope=SCOPE,
                                 keyed=frozenset({"charge"} if keyed else ()),
                                 tagged=frozenset({"charge"} if tagged else ()))
        proxy = ReconcilingProxy(up, settings, recorder)
        async with Client(proxy.server()) as client:
            yield client


def text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def test_the_upstreams_tools_are_re_exported_with_their_classes(
        provider: Provider, recorder: Recorder) -> None:
    async def main() -> list[types.Tool]:
        async with proxied(provider, recorder) as client:
            return (await client.list_tools()).tools

    tools = {t.name: effect_of(t) for t in anyio.run(main)}
    assert tools == {"charge": Effect.NON_IDEMPOTENT, "list_charges": Effect.READ_ONLY}


def call_twice(provider: Provider, recorder: Recorder, metas: list[dict[str, Any]] | None = None,
               keyed: bool = False, tagged: bool = False) -> tuple[str, str]:
    async def main() -> tuple[str, str]:
        async with proxied(provider, recorder, metas, keyed, tagged) as client:
            arguments = {"order": "A-17", "amount": 1200}
            first = await client.call_tool("charge", arguments)
            second = await client.call_tool("charge", arguments)
            return text(first), text(second)
    return anyio.run(main)


def test_a_timed_out_call_the_upstream_applied_is_not_forwarded_again(
        provider: Provider, recorder: Recorder) -> None:
    provider.faults = ["lose_response"]
    first, second = call_twice(provider, recorder, keyed=True)
    assert "charge: done (ch_1)" in first and "Do not call charge again" in first
    assert "charge: done (ch_1)" in second
    assert (provider.calls, len(provider.charges)) == (1, 1)


def test_a_timed_out_call_the_upstream_did_not_apply_is_forwarded_once_more_with_its_key(
        provider: Provider, recorder: Recorder) -> None:
    provider.faults = ["fail_before_commit"]
    first, second = call_twice(provider, recorder, keyed=True)
    assert "You may call charge again, once" in first
    assert "ch_1" in second
    assert (provider.calls, len(provider.charges)) == (2, 1)


def test_a_forwarded_call_and_its_granted_retry_carry_the_intents_idempotency_key(
        provider: Provider, recorder: Recorder) -> None:
    provider.faults = ["fail_before_commit"]
    metas: list[dict[str, Any]] = []
    call_twice(provider, recorder, metas, keyed=True)
    key = tool_operation(SCOPE, "charge", {"order": "A-17", "amount": 1200})
    assert metas == [{KEY_META: key}, {KEY_META: key}]
    assert recorder.reconcile(key).intent.idempotency_key == key


def test_a_tool_that_attaches_the_operation_id_gets_it_and_its_intent_says_so(
        provider: Provider, recorder: Recorder) -> None:
    metas: list[dict[str, Any]] = []
    call_twice(provider, recorder, metas, tagged=True)
    operation = tool_operation(SCOPE, "charge", {"order": "A-17", "amount": 1200})
    assert metas == [{OPERATION_META: operation}]
    assert recorder.reconcile(operation).intent.carries == [Carried.OPERATION_ID]


def test_a_tool_that_sends_no_key_records_none_and_is_never_sent_twice(
        provider: Provider, recorder: Recorder) -> None:
    """A key recorded but not sent is a false statement of the intent (SPEC section 3), and a
    null key gets no retry grant (rule 6): the timed-out call waits for a human."""
    provider.faults = ["fail_before_commit"]
    metas: list[dict[str, Any]] = []
    first, second = call_twice(provider, recorder, metas)
    operation = tool_operation(SCOPE, "charge", {"order": "A-17", "amount": 1200})
    assert recorder.reconcile(operation).intent.idempotency_key is None
    assert metas == [{}] and provider.calls == 1
    assert "a human decides" in first and "Do not call charge again" in first
    assert "charge: not retried: the effect may have happened; a human decides" in second


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
                                                  recorder: Recorder) -> None:
    async def main() -> list[str]:
        async with proxied(provider, recorder) as client:
            return [text(await client.call_tool("list_charges", {}))
                    for _ in range(3)]

    assert len(anyio.run(main)) == 3 and provider.calls == 0
