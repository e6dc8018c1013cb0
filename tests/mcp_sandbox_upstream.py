"""An upstream MCP server that charges at the sandbox provider, for tests that start the proxy
as a process in front of it: `python tests/mcp_sandbox_upstream.py SANDBOX_URL`.

`charge(order, amount)` creates a PaymentIntent (examples/sandbox_charge.py's `Payments`). It
sends the idempotency key the reconciling proxy puts in `_meta` as `Idempotency-Key`, and the
operation id it puts there in `metadata[operation_id]`, each only when the proxy gives it (the
tool's table says `sends_key`, `sends_operation_id`); otherwise the request carries neither,
as an SDK's MCP server's would. Its own HTTP client waits 10 s, so the proxy's
`call_timeout_s` is the client that gives up first.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import mcp.types as types
from mcp.server.mcpserver import Context, MCPServer

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
from sandbox_charge import Payments, stripe_auth

from reconciler.mcpproxy.proxy import KEY_META, OPERATION_META
from reconciler.testing.patience import PATIENCE_S

payments = Payments(sys.argv[1], http=httpx.Client(timeout=PATIENCE_S, headers=stripe_auth()))
server = MCPServer("payments")


@server.tool(annotations=types.ToolAnnotations(read_only_hint=False))
def charge(order: str, amount: int, ctx: Context) -> str:
    meta = ctx.request_context.meta or {}
    key, operation = meta.get(KEY_META), meta.get(OPERATION_META)
    metadata: dict[str, Any] = {"order": order}
    if isinstance(operation, str):
        metadata["operation_id"] = operation
    return json.dumps(payments.send(
        {"amount": amount, "currency": "eur", "confirm": True, "payment_method": "pm_card_visa",
         "metadata": metadata}, key if isinstance(key, str) else None))


if __name__ == "__main__":
    server.run()
