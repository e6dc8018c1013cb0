"""`reconciler mcp-proxy` as a client starts it: a process on stdio with an embedded store, in
front of an upstream MCP server it starts itself, probed through the upstream's read-only tool
(another process of the same server). Charges live in a file both processes read."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import mcp.types as types
from mcp import Client, StdioServerParameters

UPSTREAM = '''
import json, sys, time
from pathlib import Path
from mcp.server.mcpserver import MCPServer
import mcp.types as types

charges = Path(sys.argv[1])
server = MCPServer("payments")

@server.tool(annotations=types.ToolAnnotations(read_only_hint=False))
def charge(order: str, amount: int) -> str:
    lose = Path(str(charges) + ".lose")
    fail = Path(str(charges) + ".fail")
    if fail.exists():
        fail.unlink()
        time.sleep(3)
        return "{}"
    with charges.open("a") as f:
        f.write(json.dumps({"id": f"ch_{order}", "order": order}) + "\\n")
    if lose.exists():
        lose.unlink()
        time.sleep(3)
    return json.dumps({"id": f"ch_{order}"})

@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def list_charges(order: str) -> str:
    lines = charges.read_text().splitlines() if charges.exists() else []
    return json.dumps({"charges": [c for c in map(json.loads, lines) if c["order"] == order]})

server.run()
'''

CONFIG = '''
[mcp_proxy]
provider = "payments"
call_timeout_s = 1
scope = "run-cli"
[mcp_proxy.tools.charge]
correlate = ["order"]

[providers.payments]
idempotency_keys = true
visibility_lag_s = 0

[[providers.payments.probes]]
use = "mcp_read"
command = "{python}"
args = ["{script}", "{charges}"]
tool = "list_charges"
arguments = {{ order = "{{correlation[order]}}" }}
items = "charges"
ref = "id"
authority = "authoritative"
'''


def proxy_command(tmp_path: Path) -> tuple[StdioServerParameters, Path]:
    script, charges, config = tmp_path / "upstream.py", tmp_path / "charges", tmp_path / "p.toml"
    script.write_text(UPSTREAM)
    config.write_text(CONFIG.format(python=sys.executable, script=script, charges=charges))
    return StdioServerParameters(command=sys.executable, args=[
        "-m", "reconciler", "mcp-proxy", "--db", f"sqlite:///{tmp_path / 'r.db'}",
        "--config", str(config), "--", sys.executable, str(script), str(charges)]), charges


def call_twice(server: StdioServerParameters) -> list[str]:
    async def main() -> list[str]:
        with anyio.fail_after(60):
            async with Client(server) as client:
                answers = [await client.call_tool("charge", {"order": "A-17", "amount": 1})
                           for _ in range(2)]
        return [" ".join(c.text for c in a.content if isinstance(c, types.TextContent))
                for a in answers]
    return anyio.run(main)


def test_the_proxy_does_not_forward_a_lost_charge_again(tmp_path: Path) -> None:
    server, charges = proxy_command(tmp_path)
    Path(str(charges) + ".lose").touch()
    first, second = call_twice(server)
    assert "charge: done (ch_A-17)" in first and "charge: done (ch_A-17)" in second
    assert len(charges.read_text().splitlines()) == 1


def test_the_proxy_forwards_once_more_a_charge_that_never_happened(tmp_path: Path) -> None:
    server, charges = proxy_command(tmp_path)
    Path(str(charges) + ".fail").touch()
    first, second = call_twice(server)
    assert "You may call charge again, once" in first and "ch_A-17" in second
    assert len(charges.read_text().splitlines()) == 1
