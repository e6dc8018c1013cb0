"""An upstream MCP server for the tests that start one as a process (the proxy's and the
`mcp_read` probe's): `python tests/mcp_token_upstream.py CHARGES`.

It reads its token from the environment as it starts, as a provider's MCP server does
(`PAYMENTS_TOKEN`): without it, KeyError, and the process dies before it answers `initialize`,
which a client sees as "Connection closed". Charges are lines in the file CHARGES. `charge`
sends the idempotency key the reconciling proxy puts in `_meta` on to the "provider" (the
file): a charge under a key already charged answers the first one's id. A file CHARGES.lose
makes the next charge outlive the proxy's timeout after charging; CHARGES.fail, before.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import mcp.types as types
from mcp.server.mcpserver import Context, MCPServer

TOKEN = os.environ["PAYMENTS_TOKEN"]
#: Where the proxy sends the key (reconciler.mcpproxy.proxy.KEY_META), as a third party reads it.
KEY_META = "io.reconciler/idempotency_key"
WAIT_S = 3.0

charges = Path(sys.argv[1])
server = MCPServer("payments")


def listed() -> list[dict[str, Any]]:
    lines = charges.read_text().splitlines() if charges.exists() else []
    return [json.loads(line) for line in lines]


def marked(suffix: str) -> bool:
    flag = Path(f"{charges}{suffix}")
    if flag.exists():
        flag.unlink()
        return True
    return False


@server.tool(annotations=types.ToolAnnotations(read_only_hint=False))
def charge(order: str, amount: int, ctx: Context) -> str:
    key = (ctx.request_context.meta or {}).get(KEY_META)
    if marked(".fail"):
        time.sleep(WAIT_S)
        return "{}"
    replay = next((c for c in listed() if key and c["key"] == key), None)
    if replay is not None:
        return json.dumps({"id": replay["id"]})
    made = {"id": f"ch_{order}_{len(listed()) + 1}", "order": order, "key": key}
    with charges.open("a") as f:
        f.write(json.dumps(made) + "\n")
    if marked(".lose"):
        time.sleep(WAIT_S)
    return json.dumps({"id": made["id"]})


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def list_charges(order: str) -> str:
    return json.dumps({"charges": [c for c in listed() if c["order"] == order]})


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def environment() -> str:
    """The names (never the values) of the variables this server was started with."""
    return json.dumps(sorted(os.environ))


if __name__ == "__main__":
    server.run()
