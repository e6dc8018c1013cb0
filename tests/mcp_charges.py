"""An upstream MCP server that charges at the sandbox provider, behind the reconciling proxy,
probed through its own read-only tool (an `mcp_read` probe): the MCP proxy's run for the kill
harness (kill_harness.py). The client calls `charge` twice with the same arguments, as an
agent told "try again" would. The upstream sends the key the proxy gives it in `_meta` on to
the provider and tags the PaymentIntent with the operation id it gets there (Stripe's
`metadata[operation_id]`), as the proxy's configuration says (`keyed`, `tagged`); the probe
finds a charge by that id."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp.types as types
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from sandbox_charge import Payments

from probes.mcp_read import mcp_read
from reconciler.core.domain import Carried
from reconciler.core.sight import Sight
from reconciler.integrations.tool_calls import tool_operation
from reconciler.mcpproxy.proxy import KEY_META, OPERATION_META, ProxySettings, ReconcilingProxy

from kill_harness import PROVIDER, Worker

AMOUNT = 1200


def body(order: str, operation_id: str | None = None) -> dict[str, Any]:
    """The PaymentIntent the upstream creates for `order` (a run charges its own order) in
    the operation `operation_id` (the kill harness's `body(run_id)` hashes the proxy's)."""
    operation = operation_id or tool_operation(order, "charge",
                                               {"order": order, "amount": AMOUNT})
    return {"amount": AMOUNT, "currency": "eur", "confirm": True,
            "payment_method": "pm_card_visa",
            "metadata": {"order": order, "operation_id": operation}}


def upstream(payments: Payments) -> MCPServer:
    server = MCPServer("payments")

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=False))
    def charge(order: str, amount: int, ctx: Context) -> str:
        meta = ctx.request_context.meta or {}
        key, operation = meta.get(KEY_META), meta.get(OPERATION_META)
        sent = body(order, operation if isinstance(operation, str) else None)
        return json.dumps(payments.send(sent | {"amount": amount},
                                        key if isinstance(key, str) else None))

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
    def list_charges(order: str) -> str:
        """Every PaymentIntent of `order`, paging through the whole list (each item carries
        its metadata, which the probe matches by the operation id)."""
        found: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            page = payments.http.get(f"{payments.url}/pay/v1/payment_intents", params={
                "limit": 100, **({"starting_after": after} if after else {})})
            page.raise_for_status()
            listed = page.json()
            found += [pi for pi in listed["data"] if pi["metadata"].get("order") == order]
            if not listed["has_more"]:
                return json.dumps({"charges": found})
            after = listed["data"][-1]["id"]

    return server


def text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def drive(worker: Worker) -> list[str]:
    """The proxied run: `charge(order=run_id)` twice through the proxy."""
    server = upstream(worker.payments)
    probe = mcp_read("payments.list_charges", {
        "tool": "list_charges", "arguments": {"order": "{correlation[order]}"},
        "items": "charges", "ref": "id", "where": {"metadata.operation_id": "{operation_id}"},
        "authority": "authoritative"}, {}, connect=lambda: Client(server))
    probe.sight = Sight(frozenset({"charge"}), frozenset({Carried.OPERATION_ID}))
    worker.probes[PROVIDER] = [probe]
    settings = ProxySettings(PROVIDER, correlate={"charge": ["order"]}, call_timeout_s=5.0,
                             scope=worker.run_id, holder=worker.holder,
                             keyed=frozenset({"charge"}), tagged=frozenset({"charge"}))
    arguments = {"order": worker.run_id, "amount": AMOUNT}

    async def main() -> list[str]:
        async with Client(server) as up, \
                Client(ReconcilingProxy(up, settings, worker.backend).server()) as client:
            return [text(await client.call_tool("charge", arguments)) for _ in range(2)]

    return anyio.run(main)
