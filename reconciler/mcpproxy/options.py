"""The `[mcp_proxy]` table of a configuration file (docs/integrations/mcp.md), read with every
option checked: `reconciler mcp-proxy` reads its file through `read_proxy_table`, and
`reconciler check-config` lists the table's mistakes through the same readers. It sits beneath
both (tests/test_layers.py): check-config is built beneath the proxy, which imports the MCP SDK.

A mistake raises ProbeConfigError naming the table and the option (probes.options), as a
provider's table does: a misspelt `sends_key` must not quietly record intents with no key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from probes.options import Options
from reconciler.core.domain import Effect

EFFECTS = tuple(effect.value for effect in Effect)


@dataclass(frozen=True, slots=True)
class ProxyTool:
    """One `[mcp_proxy.tools.NAME]` table: overrides of the tool's effect class and action
    name, the arguments probes need, and what its upstream sends on to the provider."""

    effect: Effect | None
    action: str | None
    correlate: list[str] | None
    sends_key: bool
    sends_operation_id: bool


@dataclass(frozen=True, slots=True)
class ProxyTable:
    provider: str | None
    call_timeout_s: float
    scope: str | None
    pass_env: list[str] | None
    tools: dict[str, ProxyTool]


def read_proxy_table(table: Mapping[str, Any]) -> ProxyTable:
    """The `[mcp_proxy]` table and its tools' tables; ProbeConfigError at the first mistake."""
    options = Options(table, "[mcp_proxy]")
    provider = options.string("provider")
    call_timeout_s = options.number("call_timeout_s", 30.0)
    if call_timeout_s == 0:
        # No upstream answers in no time: every call would be ambiguous and go to a human.
        raise options.error("option 'call_timeout_s' must be more than 0")
    scope = options.string("scope")
    pass_env = options.list_of_strings("pass_env") if options.has("pass_env") else None
    tools = {name: read_proxy_tool(name, spec) for name, spec in options.sections("tools").items()}
    options.finish()
    return ProxyTable(provider, call_timeout_s, scope, pass_env, tools)


def read_proxy_tool(name: str, table: Mapping[str, Any]) -> ProxyTool:
    """One `[mcp_proxy.tools.NAME]` table; ProbeConfigError at the first mistake."""
    options = Options(table, f"[mcp_proxy.tools.{name}]")
    effect = options.choice("effect", EFFECTS) if options.has("effect") else None
    tool = ProxyTool(
        effect=Effect(effect) if effect is not None else None,
        action=options.string("action"),
        correlate=options.list_of_strings("correlate") if options.has("correlate") else None,
        sends_key=options.boolean("sends_key", False),
        sends_operation_id=options.boolean("sends_operation_id", False))
    options.finish()
    return tool
