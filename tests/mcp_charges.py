"""An upstream MCP server that charges at the sandbox provider, behind the reconciling proxy,
probed through its own read-only tool (an `mcp_read` probe): the MCP proxy's run for the kill
harness (kill_harness.py). The client calls `charge` twice with the same arguments, as an
agent told "try again" would."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp.types as types
from mcp import Client
from mcp.server.mcpserver import MCPServer
from sandbox_charge import Payments

from probes.mcp_read import mcp_read
from reconciler.mcpproxy.proxy import ProxySettings, ReconcilingProxy

from kill_harness import PROVIDER, Worker

AMOUNT = 1200


def body(order: str) -> dict[str, Any]:
    """The PaymentIntent the upstream creates for `order` (a run charges its own order)."""
    return {"amount": AMOUNT, "currency": "eur", "confirm": True,
            "payment_method": "pm_card_visa", "metadata": {"order": order}}


def upstream(payments: Payments) -> MCPServer:
    server = MCPServer("payments")

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=False))
    def charge(order: str, amount: int) -> str:
        return json.dumps(payments.send(body(order) | {"amount": amount}, None))

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
    def list_charges(order: str) -> str:
        """Every PaymentIntent of `order`, paging through the whole list."""
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
    worker.probes[PROVIDER] = [mcp_read("payments.list_charges", {
        "tool": "list_charges", "arguments": {"order": "{correlation[order]}"},
        "items": "charges", "ref": "id", "authority": "authoritative"}, {},
        connect=lambda: Client(server))]
    settings = ProxySettings(PROVIDER, correlate={"charge": ["order"]}, call_timeout_s=5.0,
                             scope=worker.run_id, holder=worker.holder)
    arguments = {"order": worker.run_id, "amount": AMOUNT}

    async def main() -> list[str]:
        async with Client(server) as up, \
                Client(ReconcilingProxy(up, settings, worker.backend).server()) as client:
            return [text(await client.call_tool("charge", arguments)) for _ in range(2)]

    return anyio.run(main)
