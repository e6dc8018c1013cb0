"""`reconciler mcp-proxy` as a client starts it: a process on stdio with an embedded store, in
front of an upstream MCP server it starts itself, probed through the upstream's read-only tool
(another process of the same server, started by the `mcp_read` probe). The upstream
(mcp_token_upstream.py) reads its token from the environment as it starts and dies without it;
charges live in a file both of its processes read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import mcp.types as types
from mcp import Client, StdioServerParameters

from reconciler.cli.configsight import proxy_actions
from reconciler.cli.options import EXIT_BAD_INPUT
from reconciler.core.domain import Carried

UPSTREAM = Path(__file__).with_name("mcp_token_upstream.py")
#: What the client starts the proxy with; the SDK adds its default set (PATH, HOME, ...).
CLIENT_ENV = {"PAYMENTS_TOKEN": "tok_test", "PAYMENTS_OTHER": "not for the upstream",
              "RECONCILER_TOKEN": "the reconciler's own"}

CONFIG = '''
[mcp_proxy]
provider = "payments"
call_timeout_s = 1
scope = "run-cli"
{proxy_extra}
[mcp_proxy.tools.charge]
correlate = ["order"]
{tool_extra}

[providers.payments]
idempotency_keys = true
visibility_lag_s = 0
inflight_s = 0              # a charge the upstream did not write never lands later

[[providers.payments.probes]]
use = "mcp_read"
actions = ["charge"]
command = "{python}"
args = ["{script}", "{charges}"]
tool = "list_charges"
arguments = {{ order = "{{correlation[order]}}" }}
items = "charges"
ref = "id"
where = {{ key = "{{idempotency_key}}" }}   # a charge is found by the key it was sent
authority = "authoritative"
'''


def proxy_command(tmp_path: Path, *flags: str, proxy_extra: str = "",
                  tool_extra: str = "") -> tuple[StdioServerParameters, Path]:
    charges, config = tmp_path / "charges", tmp_path / "p.toml"
    config.write_text(CONFIG.format(python=sys.executable, script=UPSTREAM, charges=charges,
                                    proxy_extra=proxy_extra, tool_extra=tool_extra))
    return StdioServerParameters(command=sys.executable, env=CLIENT_ENV, args=[
        "-m", "reconciler", "mcp-proxy", "--db", f"sqlite:///{tmp_path / 'r.db'}",
        "--config", str(config), *flags, "--", sys.executable, str(UPSTREAM),
        str(charges)]), charges


def text(answer: types.CallToolResult) -> str:
    return " ".join(c.text for c in answer.content if isinstance(c, types.TextContent))


def calls(server: StdioServerParameters, tool: str, arguments: dict[str, object],
          times: int = 1) -> list[str]:
    async def main() -> list[str]:
        with anyio.fail_after(60):
            async with Client(server) as client:
                return [text(await client.call_tool(tool, arguments)) for _ in range(times)]
    return anyio.run(main)


def charge_twice(server: StdioServerParameters) -> list[str]:
    return calls(server, "charge", {"order": "A-17", "amount": 1}, times=2)


def test_the_upstream_starts_with_the_proxys_environment(tmp_path: Path) -> None:
    server, _ = proxy_command(tmp_path)
    assert calls(server, "charge", {"order": "A-17", "amount": 1}) == ['{"id": "ch_A-17_1"}']
    names = set(json.loads(calls(server, "environment", {})[0]))
    assert {"PAYMENTS_TOKEN", "PAYMENTS_OTHER"} <= names
    assert "RECONCILER_TOKEN" not in names  # the reconciler's own, for no upstream


def test_pass_env_starts_the_upstream_with_only_the_named_variables(tmp_path: Path) -> None:
    """Besides the SDK's own default set (PATH, HOME, ...), which it always passes."""
    for flags, extra in [(("--pass-env", "PAYMENTS_TOKEN"), ""),
                         ((), 'pass_env = ["PAYMENTS_TOKEN"]')]:
        server, _ = proxy_command(tmp_path, *flags, proxy_extra=extra)
        names = set(json.loads(calls(server, "environment", {})[0]))
        assert "PAYMENTS_TOKEN" in names and "PAYMENTS_OTHER" not in names, (flags, extra)


def test_a_named_variable_that_is_not_set_stops_the_proxy_with_its_name(
        tmp_path: Path) -> None:
    server, _ = proxy_command(tmp_path, "--pass-env", "PAYMENTS_MISSING")
    done = subprocess.run([server.command, *server.args], env=CLIENT_ENV, input="",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_BAD_INPUT
    assert "PAYMENTS_MISSING" in done.stderr and "Traceback" not in done.stderr


def test_the_proxy_does_not_forward_a_lost_charge_again(tmp_path: Path) -> None:
    server, charges = proxy_command(tmp_path, tool_extra="sends_key = true")
    Path(f"{charges}.lose").touch()
    first, second = charge_twice(server)
    assert "charge: done (ch_A-17_1)" in first and "charge: done (ch_A-17_1)" in second
    assert len(charges.read_text().splitlines()) == 1


def test_the_proxy_forwards_once_more_a_charge_that_never_happened_when_it_sends_the_key(
        tmp_path: Path) -> None:
    server, charges = proxy_command(tmp_path, tool_extra="sends_key = true")
    Path(f"{charges}.fail").touch()
    first, second = charge_twice(server)
    assert "You may call charge again, once" in first and "ch_A-17_1" in second
    assert len(charges.read_text().splitlines()) == 1


def test_a_charge_that_sends_no_key_is_not_forwarded_again_and_goes_to_a_human(
        tmp_path: Path) -> None:
    server, charges = proxy_command(tmp_path)
    Path(f"{charges}.fail").touch()
    first, second = charge_twice(server)
    assert "a human decides" in first and "Do not call charge again" in first
    assert "not retried: the effect may have happened; a human decides" in second
    assert not charges.exists()


def test_check_config_reads_what_each_proxied_tool_carries() -> None:
    """So that it can say which probe could prove a zero for which tool (SPEC section 3)."""
    table = {"provider": "payments", "tools": {
        "charge": {"sends_key": True, "sends_operation_id": True},
        "refund": {"sends_operation_id": True}, "note": {}}}
    assert {a.action: a.carried for a in proxy_actions(table)} == {
        "charge": {Carried.IDEMPOTENCY_KEY, Carried.OPERATION_ID},
        "refund": {Carried.OPERATION_ID}, "note": frozenset()}
