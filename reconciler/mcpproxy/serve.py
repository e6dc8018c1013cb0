"""Running the proxy: its configuration file, its backend, and serving it over stdio.

    [mcp_proxy]
    provider = "chat"                 # the provider the upstream's effects are at
    call_timeout_s = 30               # an upstream call slower than this is ambiguous
    scope = "support-agent-7"         # the run of calls that name none in _meta
    pass_env = ["CHAT_TOKEN"]         # the upstream's variables (default: all but RECONCILER_*)
    [mcp_proxy.tools.send_message]
    effect = "non_idempotent"         # overrides the tool's annotations
    action = "send"
    correlate = ["channel"]           # arguments that are references probes need
    sends_key = true                  # the upstream sends the _meta key on to the provider
    sends_operation_id = true         # ... and the _meta operation id, in its metadata

    [providers.chat]                  # with --db: the provider's contract and probes, as in
    ...                               # the sidecar's configuration (probes may be mcp_read)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.server.stdio import stdio_server

from probes.base import Probe
from probes.config import parse_config
from probes.credentials import MissingCredential
from probes.errors import ProbeConfigError
from probes.mcp_read import passed_environment
from reconciler.client import ReconcilerClient
from reconciler.client.effects import Recorder
from reconciler.core.errors import ReconcilerError
from reconciler.effect.backends import EmbeddedBackend
from reconciler.mcpproxy.options import read_proxy_table
from reconciler.mcpproxy.proxy import ProxySettings, ReconcilingProxy
from reconciler.service.settings import read_config


class ProxyConfigError(ReconcilerError):
    """The proxy's configuration is not usable; the message names the file and the key."""


def load_settings(path: Path | None, provider: str | None, pass_env: Sequence[str] = (),
                  ) -> tuple[ProxySettings, dict[str, Any]]:
    """The proxy's settings and the rest of the file (its `[providers.*]` tables); `pass_env`
    adds to the file's `pass_env` (--pass-env)."""
    data = read_config(path) if path else {}
    where = str(path) if path else "the command line"
    try:
        table = read_proxy_table(data.pop("mcp_proxy", {}))
    except ProbeConfigError as exc:
        raise ProxyConfigError(f"{where}: {exc}") from None
    name = provider or table.provider
    if not name:
        raise ProxyConfigError(f"{where}: name the upstream's provider ([mcp_proxy] provider "
                               "or --provider)")
    tools = table.tools
    settings = ProxySettings(
        name, effects={t: spec.effect for t, spec in tools.items() if spec.effect is not None},
        actions={t: spec.action for t, spec in tools.items() if spec.action is not None},
        correlate={t: spec.correlate for t, spec in tools.items() if spec.correlate is not None},
        call_timeout_s=table.call_timeout_s,
        keyed=frozenset(t for t, spec in tools.items() if spec.sends_key),
        tagged=frozenset(t for t, spec in tools.items() if spec.sends_operation_id))
    if table.pass_env is not None or pass_env:
        settings.pass_env = [*(table.pass_env or []), *pass_env]
    if table.scope is not None:
        settings.scope = table.scope
    return settings, data


def upstream_target(command: Sequence[str], url: str | None,
                    settings: ProxySettings) -> StdioServerParameters | str:
    """The upstream: its URL, or its command started with the proxy's environment but the
    reconciler's own variables, or exactly the ones `pass_env` names (probes/mcp_read.py: the
    `mcp` package alone would start it with almost none, and a server that reads its token
    from the environment would die before answering)."""
    if url is not None:
        return url
    try:
        env = passed_environment(os.environ, settings.pass_env)
    except MissingCredential as exc:
        raise ProxyConfigError(f"pass_env: {exc}") from None
    return StdioServerParameters(command=command[0], args=list(command[1:]), env=env)


def open_backend(sidecar: str | None, db: str | None, rest: dict[str, Any],
                 source: str) -> Recorder:
    """The sidecar at `sidecar`, or an embedded store at `db` with the file's providers."""
    if db is None:
        return ReconcilerClient(sidecar)
    providers = parse_config(rest, source=source) if rest.get("providers") else {}

    def probes_for(name: str) -> Sequence[Probe]:
        setup = providers.get(name)
        return setup.probes if setup else ()

    return EmbeddedBackend(db, probes_for=probes_for,
                           contracts=[p.contract for p in providers.values()])


async def serve_stdio(upstream: StdioServerParameters | str, settings: ProxySettings,
                      backend: Recorder) -> None:
    """Connect to the upstream, then serve the proxy on this process's stdin and stdout."""
    async with Client(upstream) as client:
        server = ReconcilingProxy(client, settings, backend).server()
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
